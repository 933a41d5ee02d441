# The recommender: MovieLens ratings (RFC 4180 CSV), matrix factorisation and SASRec,
# `qkv recommend`, and qkv.recommender in Python.
list(APPEND QKV_APPS_SOURCES apps/recommender/recommender.cpp apps/recommender/csv.cpp
                             apps/recommender/options.cpp apps/recommender/model_type.cpp
                             apps/recommender/model_health.cpp)
list(APPEND QKV_APPS_CLI_SOURCES apps/recommender/cli_recommend.cpp)
list(APPEND QKV_APPS_PYTHON_SOURCES apps/recommender/python.cpp)
list(APPEND QKV_APPS_UNIT_TESTS apps/recommender/tests/test_recommender.cpp apps/recommender/tests/test_csv.cpp
                                  apps/recommender/tests/test_model_health.cpp)

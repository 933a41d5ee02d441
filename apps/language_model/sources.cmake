# The language model: GPT-2 trained on a corpus by qkv (train_lm), and `qkv score`.
list(APPEND QKV_APPS_SOURCES apps/language_model/language_model.cpp apps/language_model/options.cpp)
list(APPEND QKV_APPS_CLI_SOURCES apps/language_model/cli_score.cpp)
list(APPEND QKV_APPS_UNIT_TESTS apps/language_model/tests/test_gpt2_training.cpp)
list(APPEND QKV_APPS_PYTHON_SOURCES apps/language_model/python.cpp)

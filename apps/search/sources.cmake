# Semantic search over a corpus with USE-lite's embeddings and BM25, and `qkv embed` / `qkv search`.
# The index file is checked by SHA-256 (src/io/files.cpp).
list(APPEND QKV_APPS_SOURCES apps/search/search.cpp apps/search/bm25.cpp apps/search/options.cpp
                             apps/search/index_health.cpp)
list(APPEND QKV_APPS_CLI_SOURCES apps/search/cli_embed.cpp)
list(APPEND QKV_APPS_PYTHON_SOURCES apps/search/python.cpp)
list(APPEND QKV_APPS_UNIT_TESTS apps/search/tests/test_bm25.cpp)

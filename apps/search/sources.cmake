# Semantic search over a corpus with USE-lite's embeddings, and `qkv embed` / `qkv search`.
# The index file is checked by SHA-256 (src/io/files.cpp).
list(APPEND QKV_APPS_SOURCES apps/search/search.cpp apps/search/options.cpp)
list(APPEND QKV_APPS_CLI_SOURCES apps/search/cli_embed.cpp)
list(APPEND QKV_APPS_PYTHON_SOURCES apps/search/python.cpp)

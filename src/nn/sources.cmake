# Sources of src/nn, appended to QKV_SOURCES (paths relative to the project root).

# Sources of src/models, appended to QKV_SOURCES (paths relative to the project root).

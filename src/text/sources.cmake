# Sources of src/text, appended to QKV_SOURCES (paths relative to the project root).

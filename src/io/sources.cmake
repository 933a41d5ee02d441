# Sources of src/io, appended to QKV_SOURCES (paths relative to the project root).

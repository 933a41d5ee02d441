# Sources of src/viz, appended to QKV_SOURCES (paths relative to the project root).
list(APPEND QKV_SOURCES src/viz/common.cpp src/viz/html.cpp src/viz/svg.cpp src/viz/image_page.cpp)

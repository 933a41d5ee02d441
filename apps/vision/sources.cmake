# Vision: Fashion-MNIST (IDX files, plain or gzip) and images (PNG, PGM), the ViT and the
# point model trained on them, `qkv classify`, and qkv.vision in Python.
list(APPEND QKV_APPS_SOURCES apps/vision/vision.cpp apps/vision/idx.cpp apps/vision/image.cpp
                             apps/vision/options.cpp apps/vision/model_type.cpp)
list(APPEND QKV_APPS_CLI_SOURCES apps/vision/cli_classify.cpp)
list(APPEND QKV_APPS_PYTHON_SOURCES apps/vision/python.cpp apps/vision/python_point.cpp)
list(APPEND QKV_APPS_UNIT_TESTS apps/vision/tests/test_vision.cpp apps/vision/tests/test_idx.cpp
                                apps/vision/tests/test_image.cpp)
# zlib inflates gzip-compressed IDX files (Fashion-MNIST ships them so); libpng reads PNG
# images (image.cpp).
find_package(ZLIB REQUIRED)
find_package(PNG REQUIRED)
list(APPEND QKV_APPS_LIBRARIES ZLIB::ZLIB PNG::PNG)

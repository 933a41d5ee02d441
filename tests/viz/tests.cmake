# GoogleTest sources of tests/viz, appended to QKV_UNIT_TESTS (relative to tests/), and the
# end-to-end tests of the attention pages (label viz).
list(APPEND QKV_UNIT_TESTS viz/test_viz.cpp)
# The Viz* cases once more under one name, so `ctest -R viz` selects them with the scripts.
add_test(NAME viz.unit_tests COMMAND qkv_unit_tests --gtest_filter=Viz*)
# `qkv run --html` and `qkv generate --html`: contents against the model (GPT-2 against the
# PyTorch reference of tests/python/test_gpt2.py), help text, unwritable paths.
add_test(NAME viz.cli_html
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_cli_html.sh $<TARGET_FILE:qkv_cli>)
# A page drawn by headless Chromium (installed by scripts/setup.sh test; the test fails
# without it).
add_test(NAME viz.browser
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_browser.sh $<TARGET_FILE:qkv_cli>)
set_tests_properties(viz.unit_tests viz.cli_html viz.browser PROPERTIES TIMEOUT 300 LABELS viz)
# What each command's page shows when it opens (title, group, one head, colours, no "␣"
# in movie titles, no horizontal scrolling), read from Chromium's DOM.
add_test(NAME viz.pages
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_pages.sh $<TARGET_FILE:qkv_cli>)
set_tests_properties(viz.pages PROPERTIES TIMEOUT 120 LABELS viz)
# `qkv classify --html` (the image page) drawn by headless Chromium: the chosen and the
# misclassified images, a transparent overlay over the grey image, the model's name as title.
add_test(NAME viz.image_page
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_image_page.sh $<TARGET_FILE:qkv_cli>)
set_tests_properties(viz.image_page PROPERTIES TIMEOUT 120 LABELS viz)

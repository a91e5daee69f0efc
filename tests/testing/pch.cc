// The translation unit that builds the test suites' shared precompiled header
// (tests/CMakeLists.txt: gptc_test_pch); it defines nothing.

// The translation unit that builds the precompiled libtorch headers (gpeserve_torch_pch in
// CMakeLists.txt); it has no code of its own.

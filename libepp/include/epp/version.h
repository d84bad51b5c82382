// The library version, set from the CMake project version.
#pragma once

#define EPP_VERSION_STRING "0.1.0"

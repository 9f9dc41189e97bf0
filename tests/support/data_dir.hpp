#pragma once
// Where the shared data lives: $LYNX_SHARED_DIR, else the path CMake baked in (../shared).

#include <cstdlib>
#include <string>
#include <sys/stat.h>

#ifndef LYNX_SHARED_DIR_DEFAULT
#define LYNX_SHARED_DIR_DEFAULT "../shared"
#endif

namespace lynx_test {

inline std::string shared_dir() {
  const char* env = std::getenv("LYNX_SHARED_DIR");
  return env && *env ? env : LYNX_SHARED_DIR_DEFAULT;
}

inline bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace lynx_test

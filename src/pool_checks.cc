#include "evpool/pool_checks.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace evpool::detail {

bool checks_requested_by_environment() {
  const char *value = std::getenv("EVPOOL_CHECKED");
  if (value == nullptr || *value == '\0' || std::strcmp(value, "0") == 0) return false;
  if (std::strcmp(value, "1") == 0) return true;
  throw std::invalid_argument(std::string("evpool: EVPOOL_CHECKED=") + value +
                              " is neither 0 nor 1 (1 turns checked mode on for every pool)");
}

namespace {

std::string hex(std::uintptr_t value) {
  char text[2 + 2 * sizeof value + 1];
  std::snprintf(text, sizeof text, "0x%jx", static_cast<std::uintmax_t>(value));
  return text;
}

// The name a symbol has in the source, where the dynamic symbol table has it.
std::string demangled(const char *symbol) {
  int status = 0;
  char *name = abi::__cxa_demangle(symbol, nullptr, nullptr, &status);
  std::string text = status == 0 && name != nullptr ? name : symbol;
  std::free(name);
  return text;
}

// The running program's path, as addr2line in another process must be given it.
std::string this_program() {
  char path[4096];
  const ssize_t length = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return length > 0 ? std::string(path, static_cast<std::size_t>(length)) : std::string("(this program)");
}

}  // namespace

std::string describe_stack(void *const *frames, int depth, const char *indent) {
  std::string text;
  std::map<std::string, std::vector<std::uintptr_t>> addresses_by_object;  // for addr2line
  for (int frame = 0; frame < depth; ++frame) {
    const auto address = reinterpret_cast<std::uintptr_t>(frames[frame]);
    // Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict, a false positive: GCC bugs 105329, 105651)
    // on `literal + std::string` here, which fails a release build with -Dwerror=true.
    text.append(indent).append("#").append(std::to_string(frame)).append(" ");
    Dl_info info{};
    link_map *map = nullptr;
    if (::dladdr1(frames[frame], &info, reinterpret_cast<void **>(&map), RTLD_DL_LINKMAP) == 0 || map == nullptr) {
      text += hex(address) + " (in no object file loaded)\n";
      continue;
    }
    // The main program's name may be empty, or relative to a directory since left.
    const std::string object =
        info.dli_fname != nullptr && info.dli_fname[0] == '/' ? info.dli_fname : this_program();
    // addr2line knows an object by the addresses it was linked at: the running address less the
    // object's load bias (l_addr, 0 for a program linked at a fixed address). Not less the
    // address of its ELF header (dli_fbase): the two differ for an object whose first segment is
    // not linked at 0 (lld's image base, prelinked libraries).
    const std::uintptr_t offset = address - static_cast<std::uintptr_t>(map->l_addr);
    if (info.dli_sname != nullptr)
      text += demangled(info.dli_sname) + " + " +
              hex(address - reinterpret_cast<std::uintptr_t>(info.dli_saddr)) + " ";
    text += "(" + object + " " + hex(offset) + ")\n";
    // A frame's address is where its call returns to: one byte back is inside the call itself,
    // whose line is the one to show.
    addresses_by_object[object].push_back(offset - 1);
  }
  for (const auto &[object, addresses] : addresses_by_object) {
    text.append(indent).append("names and lines: addr2line -C -f -i -e ").append(object);
    for (std::uintptr_t address : addresses) text.append(" ").append(hex(address));
    text += "\n";
  }
  return text;
}

}  // namespace evpool::detail

#include "evpool/pool_checks.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace evpool::detail {

bool checks_requested_by_environment() {
  const char *value = std::getenv("EVPOOL_CHECKED");
  if (value == nullptr || *value == '\0' || std::strcmp(value, "0") == 0) return false;
  if (std::strcmp(value, "1") == 0) return true;
  throw std::invalid_argument(std::string("evpool: EVPOOL_CHECKED=") + value +
                              " is neither 0 nor 1 (1 turns checked mode on for every pool)");
}

}  // namespace evpool::detail

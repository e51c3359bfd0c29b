// The header every test program precompiles (test/meson.build): GoogleTest, the standard headers
// most tests include, and the core. Each test file still includes what it uses; this only spares
// each one parsing them again.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"

// The CUDA parts where they can be checked without a GPU: argument checks that come before any
// CUDA call, ownership of adopted handles, and the errors where CUDA has no driver or no device.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "cuda_availability.h"
#include "evpool/cuda_error.h"
#include "evpool/cuda_event.h"
#include "evpool/cuda_event_pool.h"
#include "evpool/cuda_stream.h"

namespace evpool {
namespace {

using testing::HasSubstr;

// A made-up handle: these tests release it before the event dies, so CUDA never sees it.
cudaEvent_t fake_handle() { return reinterpret_cast<cudaEvent_t>(0x1000); }

TEST(CUDAEvent, AnEmptyEventIsFalseAndHasNoDevice) {
  CUDAEvent event;
  EXPECT_FALSE(event);
  EXPECT_EQ(event.get(), nullptr);
  EXPECT_EQ(static_cast<cudaEvent_t>(event), nullptr);
  EXPECT_EQ(event.device_id(), -1);
  EXPECT_EQ(event.release(), nullptr);
}

TEST(CUDAEvent, AdoptsAHandleWithItsDeviceAndMovesIt) {
  CUDAEvent event(fake_handle(), 3);
  EXPECT_TRUE(event);
  EXPECT_EQ(event.get(), fake_handle());
  EXPECT_EQ(static_cast<cudaEvent_t>(event), fake_handle());
  EXPECT_EQ(event.device_id(), 3);

  CUDAEvent moved(std::move(event));
  EXPECT_FALSE(event);  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_EQ(event.device_id(), -1);
  EXPECT_EQ(moved.device_id(), 3);

  CUDAEvent assigned;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.get(), fake_handle());
  EXPECT_EQ(assigned.release(), fake_handle());
  EXPECT_FALSE(assigned);
  EXPECT_EQ(assigned.device_id(), -1);
}

// CUDAStream is the same owner over another handle type: adopting, moving and releasing a stream
// make no CUDA call either.
// reset() to the handle held would destroy it and keep it: refused, the owner unchanged, and no
// CUDA call made (none could succeed here).
TEST(CUDAEvent, ResetToTheHandleItHoldsIsRefusedAndChangesNothing) {
  CUDAEvent event(fake_handle(), 3);
  try {
    event.reset(event.get(), 3);
    ADD_FAILURE() << "reset to the handle held was accepted";
  } catch (const std::invalid_argument &error) {
    EXPECT_NE(std::string(error.what()).find("which this owner holds already"), std::string::npos)
        << error.what();
  }
  EXPECT_EQ(event.get(), fake_handle());
  EXPECT_EQ(event.device_id(), 3);
  EXPECT_EQ(event.release(), fake_handle());
}

TEST(CUDAStream, AdoptsAHandleWithItsDeviceAndMovesIt) {
  const auto handle = reinterpret_cast<cudaStream_t>(0x2000);
  CUDAStream stream(handle, 2);
  EXPECT_EQ(static_cast<cudaStream_t>(stream), handle);
  EXPECT_EQ(stream.device_id(), 2);
  CUDAStream assigned;
  assigned = std::move(stream);
  EXPECT_FALSE(stream);  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_EQ(assigned.device_id(), 2);
  EXPECT_EQ(assigned.release(), handle);
  EXPECT_EQ(assigned.device_id(), -1);
}

TEST(CUDAEvent, AdoptedHandleOfUnknownDeviceRecordsMinusOne) {
  CUDAEvent event(fake_handle());
  EXPECT_EQ(event.device_id(), -1);
  event.release();
}

TEST(CUDAEvent, RejectsFlagsCudaWouldRejectBeforeCallingCuda) {
  EXPECT_THROW(CUDAEvent::CreateWithFlags(0x100), std::invalid_argument);
  try {
    CUDAEvent::CreateWithFlags(cudaEventInterprocess);
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument &error) {
    EXPECT_THAT(error.what(), HasSubstr("cudaEventInterprocess without cudaEventDisableTiming"));
  }
}

TEST(CUDAEventPool, RejectsInvalidFlagsBeforeCallingCuda) {
  EXPECT_THROW(CUDAEventPool pool(0x80), std::invalid_argument);
  EXPECT_THROW(CUDAEventPool pool(cudaEventInterprocess | cudaEventBlockingSync), std::invalid_argument);
}

TEST(CUDAError, NamesTheCallAndCudasMessage) {
  const CUDAError error(cudaErrorInvalidDevice, "cudaSetDevice");
  EXPECT_EQ(error.error(), cudaErrorInvalidDevice);
  EXPECT_THAT(error.what(), HasSubstr("cudaSetDevice failed"));
  EXPECT_THAT(error.what(), HasSubstr(cudaGetErrorString(cudaErrorInvalidDevice)));
  EXPECT_THAT(error.what(), HasSubstr("cudaErrorInvalidDevice"));
}

TEST(CUDAEventPoolWithoutGpu, ConstructionThrowsCudaErrorWithCudasMessage) {
  EVPOOL_REQUIRE_NO_GPU();
  try {
    CUDAEventPool pool;
    ADD_FAILURE() << "no exception";
  } catch (const CUDAError &error) {
    EXPECT_NE(error.error(), cudaSuccess);
    EXPECT_THAT(error.what(), HasSubstr("cudaGetDeviceCount failed"));
    EXPECT_THAT(error.what(), HasSubstr(describe_cuda_error(error.error())));
  }
}

// Without a driver the runtime says cudaErrorInsufficientDriver, "CUDA driver version is
// insufficient for CUDA runtime version", which sends a reader to upgrade a driver the machine
// does not have: the message says that none was found, and keeps CUDA's name and number.
TEST(CUDAErrorWithoutADriver, SaysThatNoDriverWasFound) {
  int driver_version = -1;
  ASSERT_EQ(cudaDriverGetVersion(&driver_version), cudaSuccess);
  if (driver_version != 0)
    GTEST_SKIP() << "checks the message where no CUDA driver is installed, and this machine has one";
  EXPECT_EQ(describe_cuda_error(cudaErrorInsufficientDriver),
            "no CUDA driver was found (no GPU, or the driver is not installed)");
  const CUDAError error(cudaErrorInsufficientDriver, "cudaGetDeviceCount");
  EXPECT_STREQ(error.what(), "evpool: cudaGetDeviceCount failed: no CUDA driver was found (no GPU, or the driver is not "
                             "installed) (cudaErrorInsufficientDriver, 35)");
  try {
    CUDAEventPool pool;
    ADD_FAILURE() << "no exception";
  } catch (const CUDAError &refused) {
    EXPECT_THAT(refused.what(), HasSubstr("no CUDA driver was found"));
    EXPECT_THAT(refused.what(), testing::Not(HasSubstr("insufficient")));
  }
}

TEST(CUDAError, OtherErrorsKeepCudasOwnDescription) {
  EXPECT_EQ(describe_cuda_error(cudaErrorInvalidDevice), cudaGetErrorString(cudaErrorInvalidDevice));
  EXPECT_EQ(describe_cuda_error(cudaErrorInvalidValue), cudaGetErrorString(cudaErrorInvalidValue));
}

TEST(CUDAEventPoolWithoutGpu, InstanceThrowsCudaErrorAndCanBeRetried) {
  EVPOOL_REQUIRE_NO_GPU();
  EXPECT_THROW(CUDAEventPool::instance(), CUDAError);
  EXPECT_THROW(CUDAEventPool::instance(), CUDAError);
}

TEST(CUDAEventWithoutGpu, CreateThrowsCudaError) {
  EVPOOL_REQUIRE_NO_GPU();
  EXPECT_THROW(CUDAEvent::Create(), CUDAError);
  EXPECT_THROW(CUDAEvent::CreateWithFlags(cudaEventDefault, 0), CUDAError);
}

TEST(CUDAStreamWithoutGpu, CreateThrowsCudaError) {
  EVPOOL_REQUIRE_NO_GPU();
  EXPECT_THROW(CUDAStream::Create(true), CUDAError);
  EXPECT_THROW(CUDAStream::CreateWithPriority(false, 0, 0), CUDAError);
}

}  // namespace
}  // namespace evpool

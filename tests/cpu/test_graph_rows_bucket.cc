// mlakit::graph_rows_bucket: 256-row steps up to 1024 rows, then steps of step_above, capped at
// the workspace rows; rows outside [0, cap] and a step below 1 are rejected naming the argument.
#include <gtest/gtest.h>

#include "mlakit/mlakit.h"
#include "util/test_util.h"

namespace mlakit {
namespace {

using test::throws_error;

TEST(GraphRowsBucket, RoundsUpInStepsAndCaps) {
  EXPECT_EQ(graph_rows_bucket(0, 8192), 256);
  EXPECT_EQ(graph_rows_bucket(1, 8192), 256);
  EXPECT_EQ(graph_rows_bucket(256, 8192), 256);
  EXPECT_EQ(graph_rows_bucket(257, 8192), 512);
  EXPECT_EQ(graph_rows_bucket(999, 8192), 1024);
  EXPECT_EQ(graph_rows_bucket(1025, 8192), 1280);
  EXPECT_EQ(graph_rows_bucket(8192, 8993), 8192);
  EXPECT_EQ(graph_rows_bucket(8392, 8993), 8448);
  EXPECT_EQ(graph_rows_bucket(8961, 8993), 8993);  // capped at the workspace rows
  EXPECT_EQ(graph_rows_bucket(100, 200), 200);
  // Other steps above 1024: the region up to 1024 keeps 256-row steps.
  EXPECT_EQ(graph_rows_bucket(999, 8192, 1024), 1024);
  EXPECT_EQ(graph_rows_bucket(1025, 8192, 1024), 2048);
  EXPECT_EQ(graph_rows_bucket(8193, 8993, 1024), 8993);
  EXPECT_EQ(graph_rows_bucket(2049, 8192, 100), 2100);
}

TEST(GraphRowsBucket, RejectsRowsOutsideTheCapAndBadSteps) {
  EXPECT_TRUE(throws_error([] { graph_rows_bucket(9000, 8993); }, ErrorKind::kInvalidArgument, "rows"));
  EXPECT_TRUE(throws_error([] { graph_rows_bucket(-1, 8993); }, ErrorKind::kInvalidArgument, "rows"));
  EXPECT_TRUE(throws_error([] { graph_rows_bucket(2049, 8192, 0); }, ErrorKind::kInvalidArgument, "step_above"));
}

}  // namespace
}  // namespace mlakit

// plan::check_block_table_row, the per-entry check of a host block table that latent
// attention's and the MLA step's plan() run: every entry outside [0, num_blocks) is found,
// wherever it sits in a row of any length (the vectorized pass and its scalar tail), and the
// error names the first offender.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "mlakit/error.h"
#include "plan/block_table_check.h"

namespace mlakit {
namespace test {
namespace {

// The message of the error the check throws, or "" when it accepts the row.
std::string rejection(const std::vector<int32_t>& row, int64_t blocks, int64_t num_blocks) {
  try {
    plan::check_block_table_row(row.data(), blocks, num_blocks, 3);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_EQ(e.argument(), "block_table");
    return e.what();
  }
  return "";
}

TEST(BlockTableCheck, EveryOffenderAtEveryPlaceOfEveryLength) {
  const int64_t num_blocks = 1000;
  const int32_t bad[] = {-1, std::numeric_limits<int32_t>::min(), 1000, 1001, std::numeric_limits<int32_t>::max()};
  for (int64_t n = 1; n <= 37; ++n) {
    std::vector<int32_t> row(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) row[static_cast<size_t>(i)] = static_cast<int32_t>((i * 389) % num_blocks);
    row[0] = 0;
    row[static_cast<size_t>(n - 1)] = static_cast<int32_t>(num_blocks - 1);  // both ends of the range
    ASSERT_EQ(rejection(row, n, num_blocks), "") << "n " << n;
    for (int64_t at = 0; at < n; ++at) {
      for (int32_t v : bad) {
        std::vector<int32_t> r = row;
        r[static_cast<size_t>(at)] = v;
        const std::string msg = rejection(r, n, num_blocks);
        EXPECT_NE(msg.find("block_table[3][" + std::to_string(at) + "] = " + std::to_string(v)), std::string::npos)
            << "n " << n << " at " << at << " value " << v << ": " << msg;
        // Entries past the row's used blocks are not read.
        EXPECT_EQ(rejection(r, at, num_blocks), "") << "n " << n << " at " << at;
      }
    }
  }
}

TEST(BlockTableCheck, NamesTheFirstOffender) {
  std::vector<int32_t> row(64, 5);
  row[40] = 64;
  row[9] = -7;
  EXPECT_NE(rejection(row, 64, 64).find("block_table[3][9] = -7 is outside [0, config.num_blocks = 64)"),
            std::string::npos);
}

}  // namespace
}  // namespace test
}  // namespace mlakit

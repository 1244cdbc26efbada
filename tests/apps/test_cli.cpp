// The command-line helpers every app shares (apps/common/cli.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/cli.h"

namespace kda::app {
namespace {

struct Item {
  std::string id;
  int n = 0;
};
std::string id_of(const Item& item) { return item.id; }

TEST(SelectOnly, KeepsTheListedIdsInTheirOwnOrder) {
  std::vector<Item> items = {{"a", 1}, {"b", 2}, {"c", 3}, {"a", 4}};
  EXPECT_FALSE(select_only(&items, {"c", "a"}, "s.yaml", id_of).has_value());
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].n, 1);  // file order, not --only order
  EXPECT_EQ(items[1].n, 3);
  EXPECT_EQ(items[2].n, 4);  // both shapes of id a (two shape files)
}

TEST(SelectOnly, EmptyKeepsEverything) {
  std::vector<Item> items = {{"a"}, {"b"}};
  EXPECT_FALSE(select_only(&items, {}, "s.yaml", id_of).has_value());
  EXPECT_EQ(items.size(), 2u);
}

TEST(SelectOnly, AnUnknownIdIsRefusedNamingTheKnownOnesOnce) {
  std::vector<Item> items = {{"a"}, {"b"}, {"a"}};
  const auto refusal = select_only(&items, {"b", "nope"}, "x.yaml, y.yaml", id_of);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(*refusal, "--only nope: no such shape id in x.yaml, y.yaml (it has: a, b)");
  EXPECT_EQ(items.size(), 3u);  // untouched
}

TEST(ExitCodes, AreTheDocumentedOnes) {
  EXPECT_EQ(kExitOk, 0);
  EXPECT_EQ(kExitFailed, 1);
  EXPECT_EQ(kExitUsage, 2);
  EXPECT_EQ(kExitDevice, 3);
}

TEST(Seed, DecimalDigitsOnly) {
  EXPECT_EQ(parse_seed("18446744073709551615"), UINT64_MAX);
  EXPECT_FALSE(parse_seed("-1").has_value());
  EXPECT_FALSE(parse_seed("18446744073709551616").has_value());
  EXPECT_EQ(parse_seed("010"), 10u);
}

}  // namespace
}  // namespace kda::app

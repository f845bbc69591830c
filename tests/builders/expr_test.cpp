#include "builders/expr.h"

#include <gtest/gtest.h>

namespace kiln::builders {
namespace {

const std::map<std::string, int64_t> k_names = {{"n", 1000}, {"block", 256}, {"rows", 3}, {"cols", 7}};

TEST(ExprTest, Evaluates) {
  EXPECT_EQ(eval_expr("n", k_names).value(), 1000);
  EXPECT_EQ(eval_expr("rows * cols", k_names).value(), 21);
  EXPECT_EQ(eval_expr("cdiv(n, block)", k_names).value(), 4);
  EXPECT_EQ(eval_expr("cdiv(1024, block)", k_names).value(), 4);
  EXPECT_EQ(eval_expr("max(n / 300, 1) + -2 * (1 + 1) % 3", k_names).value(), 3 + -1);
  EXPECT_EQ(eval_expr(" 7 ", k_names).value(), 7);
}

TEST(ExprTest, ErrorsSayWhere) {
  auto r = eval_expr("n * m", k_names);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("col 5"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("unknown name 'm'"), std::string::npos);
  EXPECT_FALSE(eval_expr("n / (block - 256)", k_names).ok());
  EXPECT_FALSE(eval_expr("cdiv(n)", k_names).ok());
  EXPECT_FALSE(eval_expr("sqrt(n)", k_names).ok());
  EXPECT_FALSE(eval_expr("n +", k_names).ok());
  EXPECT_FALSE(eval_expr("(n", k_names).ok());
  EXPECT_FALSE(eval_expr("99999999999999999999", k_names).ok());
  EXPECT_FALSE(eval_expr("9223372036854775807 * 2", k_names).ok());
  EXPECT_FALSE(eval_expr("", k_names).ok());
}

TEST(ExprTest, DeepNestingIsAnErrorNotACrash) {
  EXPECT_FALSE(eval_expr(std::string(100000, '(') + "1", k_names).ok());
  EXPECT_FALSE(eval_expr(std::string(100000, '-') + "1", k_names).ok());
}

}  // namespace
}  // namespace kiln::builders

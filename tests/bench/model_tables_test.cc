#include "bench/models/model_tables.h"

#include <gtest/gtest.h>

namespace phub::bench {
namespace {

TEST(ModelTables, ResNet50HasThePublishedParameterCount) {
  auto tensors = ResNet50Tensors();
  std::uint64_t total = 0;
  for (const auto& t : tensors) total += t.elements;
  EXPECT_EQ(total, 25'557'032u);
  EXPECT_EQ(tensors.size(), 161u);
  EXPECT_EQ(tensors.front().name, "conv1.weight");
  EXPECT_EQ(tensors.back().name, "fc.bias");
}

TEST(ModelTables, UnknownModelIsRefusedWithTheKnownNames) {
  auto tensors = ModelTensors("resnet51");
  ASSERT_FALSE(tensors.ok());
  EXPECT_NE(tensors.status().message().find("resnet50"), absl::string_view::npos);
}

}  // namespace
}  // namespace phub::bench

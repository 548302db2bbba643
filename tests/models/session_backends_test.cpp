// Session on every compiled backend: a decode step replayed from its recorded graph gives the
// same logits as the step run op by op, and incremental decoding agrees with one prefill.
// (Backends whose streams cannot record run eagerly either way, so there the first test is a
// plain repeatability check.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ding/ding.h"
#include "ding/models/session.h"
#include "op_cases.h"
#include "tiny_fixture.h"

namespace ding::testing {
namespace {

std::vector<float> to_host(Session& session, const Tensor& logits) {
  std::vector<float> host(static_cast<size_t>(logits.numel()));
  download(session.stream(), host.data(), logits, logits.nbytes());
  return host;
}

class SessionOnBackend : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!registry::is_available(GetParam())) GTEST_SKIP() << "backend " << GetParam() << " has no device on this machine";
  }
};

// Two sequences decoded together for 6 steps: step 1 runs eagerly, step 2 is recorded and
// replayed, steps 3–6 are replays with new ids, positions and lengths each time.
TEST_P(SessionOnBackend, GraphReplayMatchesEagerDecode) {
  Model model = Model::load(kTinyFixture.string(), Device::open(GetParam()));
  Session graphs(model, {.max_batch = 2, .graphs = true}), eager(model, {.max_batch = 2, .graphs = false});
  const auto a = tiny_prompt_ids(9), b = tiny_prompt_ids(4);
  for (Session* s : {&graphs, &eager}) {
    s->prefill(0, a);
    s->prefill(1, b);
  }
  std::vector<Token> next = {11, 23};
  for (int step = 0; step < 6; ++step) {
    const std::vector<float> expected = to_host(eager, eager.decode(next));
    const std::vector<float> actual = to_host(graphs, graphs.decode(next));
    ASSERT_EQ(actual.size(), expected.size());
    // The same kernels on the same inputs: identical, not merely close.
    EXPECT_EQ(actual, expected) << "decode step " << step;
    next = {Token(100 + 7 * step), Token(300 + 5 * step)};
  }
}

TEST_P(SessionOnBackend, DecodeStepByStepMatchesPrefill) {
  Model model = Model::load(kTinyFixture.string(), Device::open(GetParam()));
  const auto prompt = tiny_prompt_ids(12);
  Session whole(model);
  std::vector<float> expected;
  whole.prefill(0, prompt, &expected);
  Session stepwise(model);
  std::vector<float> actual;
  stepwise.prefill(0, std::span(prompt).first(1), &actual);
  for (size_t i = 1; i < prompt.size(); ++i) {
    const Token t[1] = {prompt[i]};
    const std::vector<float> row = to_host(stepwise, stepwise.decode(t));
    actual.insert(actual.end(), row.begin(), row.end());
  }
  ASSERT_EQ(actual.size(), expected.size());
  // f32 compute: prefill (tiled attention) and decode (split attention) sum in different
  // orders; the f32 rounding of that is ~1e-13 in NMSE on this model.
  EXPECT_LE(nmse(std::vector<double>(actual.begin(), actual.end()), std::vector<double>(expected.begin(), expected.end())),
            1e-10);
}

std::vector<std::string> backends() {
  std::vector<std::string> names;
  for (const std::string& b : registry::compiled_backends())
    if (b != "ref") names.push_back(b);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Backends, SessionOnBackend, ::testing::ValuesIn(backends()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace ding::testing

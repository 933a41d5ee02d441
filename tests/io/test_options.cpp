// One declaration of a command's options (qkv/options.h): parsing the CLI's text, checking
// a front end's value, setting fields (plain, nested, custom), the set's checks, and the
// messages for unknown and renamed options.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "attention/expect_error.h"
#include "qkv/options.h"

namespace {

using qkv::ErrorKind;
using qkv::options::OptionError;
using qkv::options::OptionSet;
using qkv::options::Spec;
using qkv::options::Value;
using qkv::testing::expect_error_mentioning;

struct Inner {
  std::int64_t width = 8;
};
struct Target {
  std::int64_t steps = 10;
  std::uint64_t seed = 0;
  double lr = 1e-3;
  bool resume = false;
  std::string out = "model";
  std::string mode = "fast";
  bool learned = true;
  Inner inner;
};

OptionSet<Target> declared() {
  OptionSet<Target> s("train toy", "A toy");
  s.integer("steps", &Target::steps, 1, 100, "Steps");
  s.seed("seed", &Target::seed, "Seed");
  s.number("lr", &Target::lr, 0.0, true, 1.0, false, "Rate");
  s.flag("resume", &Target::resume, "Resume");
  s.path("out", &Target::out, "Out");
  s.choice("mode", &Target::mode, {"fast", "slow"}, "Mode");
  s.integer("width", [](Target& t) -> auto& { return t.inner.width; }, 2, 64, "Width").old_names = {"n_width"};
  s.custom<std::string>(OptionSet<Target>::choice_spec("positions", {"learned", "fixed"}, "Positions"),
                        [](const Target& t) { return std::string(t.learned ? "learned" : "fixed"); },
                        [](Target& t, const std::string& v) { t.learned = v == "learned"; });
  s.check([](Target& t) {
    if (t.inner.width % 2 != 0) throw OptionError("width", "must be even");
  });
  return s;
}

TEST(Options, DefaultsAreWhatTheTargetHolds) {
  const OptionSet<Target> s = declared();
  EXPECT_EQ(qkv::options::find(s.specs(), "steps")->default_text(), "10");
  EXPECT_EQ(qkv::options::find(s.specs(), "lr")->default_text(), "0.001");
  EXPECT_EQ(qkv::options::find(s.specs(), "width")->default_text(), "8");
  EXPECT_EQ(qkv::options::find(s.specs(), "positions")->default_text(), "learned");
  EXPECT_EQ(qkv::options::find(s.specs(), "resume")->default_text(), "false");
  EXPECT_EQ(qkv::options::find(s.specs(), "width")->cli_name(), "--width");
}

TEST(Options, ParseRefusesTextOutsideTheRange) {
  const OptionSet<Target> s = declared();
  const Spec& steps = *qkv::options::find(s.specs(), "steps");
  EXPECT_EQ(std::get<std::int64_t>(steps.parse("1")), 1);
  EXPECT_EQ(std::get<std::int64_t>(steps.parse("100")), 100);
  for (const char* bad : {"0", "101", "1.5", "abc", "", " 3", "3 ", "99999999999999999999"})
    expect_error_mentioning([&] { steps.parse(bad); }, {"must be an integer in [1, 100], got '"});
  const Spec& lr = *qkv::options::find(s.specs(), "lr");
  EXPECT_EQ(std::get<double>(lr.parse("1")), 1.0);
  EXPECT_EQ(std::get<double>(lr.parse("+0.5")), 0.5);
  for (const char* bad : {"0", "1.0001", "nan", "inf", "-inf", "x", ""})
    expect_error_mentioning([&] { lr.parse(bad); }, {"must be a finite number in (0, 1], got '"});
  const Spec& seed = *qkv::options::find(s.specs(), "seed");
  EXPECT_EQ(std::get<std::uint64_t>(seed.parse("18446744073709551615")), std::numeric_limits<std::uint64_t>::max());
  expect_error_mentioning([&] { seed.parse("18446744073709551616"); }, {"[0, 2^64)"});
  expect_error_mentioning([&] { seed.parse("-1"); }, {"[0, 2^64)"});
  expect_error_mentioning([&] { qkv::options::find(s.specs(), "mode")->parse("medium"); },
                          {"must be one of fast, slow, got 'medium'"});
  expect_error_mentioning([&] { qkv::options::find(s.specs(), "out")->parse(""); },
                          {"must name a file or directory, got ''"});
}

TEST(Options, SetChecksKindAndRangeAndFinishRunsTheChecks) {
  const OptionSet<Target> s = declared();
  Target t = s.make();
  s.set(t, "steps", Value(std::int64_t{42}));
  s.set(t, "width", Value(std::int64_t{16}));
  s.set(t, "positions", Value(std::string("fixed")));
  s.set(t, "resume", Value(true));
  s.finish(t);
  EXPECT_EQ(t.steps, 42);
  EXPECT_EQ(t.inner.width, 16);
  EXPECT_FALSE(t.learned);
  EXPECT_TRUE(t.resume);
  try {
    s.set(t, "steps", Value(1.5));
    FAIL() << "a double for an integer option was taken";
  } catch (const OptionError& e) {
    EXPECT_EQ(e.option(), "steps");
    EXPECT_EQ(e.kind(), ErrorKind::type);
  }
  try {
    s.set(t, "steps", Value(std::int64_t{0}));
    FAIL() << "0 for steps in [1, 100] was taken";
  } catch (const OptionError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::value);
    EXPECT_NE(std::string(e.what()).find("must be an integer in [1, 100], got 0"), std::string::npos) << e.what();
  }
  EXPECT_EQ(t.steps, 42) << "a refused value changed the target";
  s.set(t, "width", Value(std::int64_t{7}));
  try {
    s.finish(t);
    FAIL() << "the check across options did not run";
  } catch (const OptionError& e) {
    EXPECT_EQ(e.option(), "width");
  }
}

TEST(Options, UnknownAndRenamedOptionsAreNamed) {
  const OptionSet<Target> s = declared();
  Target t = s.make();
  expect_error_mentioning([&] { s.set(t, "n_width", Value(std::int64_t{4})); }, {"n_width is now width"});
  expect_error_mentioning([&] { s.set(t, "stepz", Value(std::int64_t{4})); },
                          {"unknown option stepz (did you mean steps?)", "the options are steps, seed, lr"});
  EXPECT_EQ(qkv::options::unknown_option_message(s.specs(), "n_width", true), "--n-width is now --width");
  EXPECT_NE(qkv::options::unknown_option_message(s.specs(), "zzzzzz", true).find("unknown option --zzzzzz; the options are --steps"),
            std::string::npos);
}

}  // namespace

// The date translator's checked answers (dates/dates.h, translate_dates_checked): the
// embedded model on inputs that are not dates it can read must be refused with a reason,
// never answered; and the unchecked translate_dates refuses control characters.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dates/dates.h"
#include "qkv/error.h"
#include "qkv/seq2seq.h"

namespace {

namespace models = qkv::models;

// Row 5 of the hostile-input issue: inputs that are not dates the model can read are
// refused with a reason, never answered; dates in its formats are answered and accepted.
TEST(DateTranslator, CheckedTranslationRefusesInventedAnswers) {
  if (!models::has_embedded_date_model()) GTEST_SKIP() << "this build embeds no date model";
  const models::Seq2Seq model = models::embedded_date_model();
  const std::vector<std::string> inputs{"Saturday, 21 November 2026", "hello", "13/13/2013",
                                        "31 February 2023", "2023-13-45", "the 3rd of March, 1999",
                                        "2026年11月21日", "21 Nov\a 2026", "", "\xff" "2026",
                                        std::string(80, '1'), "Monday, 21 November 2026"};
  const auto got = models::translate_dates_checked(model, inputs);
  ASSERT_EQ(got.size(), inputs.size());
  const auto expect_ok = [&](std::size_t i, const char* want) {
    EXPECT_TRUE(got[i].ok()) << inputs[i] << ": " << got[i].problem;
    EXPECT_EQ(got[i].output, want) << inputs[i];
  };
  expect_ok(0, "2026-11-21");
  expect_ok(5, "1999-03-03");
  expect_ok(6, "2026-11-21");
  for (std::size_t i : {1, 2, 3, 4}) {
    EXPECT_FALSE(got[i].ok()) << inputs[i] << " -> " << got[i].output;
    EXPECT_NE(got[i].problem.find("the model's answer"), std::string::npos) << got[i].problem;
  }
  EXPECT_EQ(got[7].problem, "the input has a control character (U+0007) at character 7");
  EXPECT_EQ(got[7].output, "");
  EXPECT_EQ(got[8].problem, "the input is empty");
  EXPECT_NE(got[9].problem.find("is not valid UTF-8 at byte offset 0 (byte 0xff)"),
            std::string::npos) << got[9].problem;
  EXPECT_EQ(got[10].problem, "the input has 80 characters; the model reads at most 64");
  // A calendar date the input does not name: the weekday disagrees.
  EXPECT_EQ(got[11].output, "2026-11-21");
  EXPECT_EQ(got[11].problem,
            "the model's answer is 2026-11-21; the input says Monday, but 2026-11-21 is a "
            "Saturday");
}

// The unchecked translation refuses control characters too, naming the input.
TEST(DateTranslator, ControlCharactersThrow) {
  if (!models::has_embedded_date_model()) GTEST_SKIP() << "this build embeds no date model";
  const models::Seq2Seq model = models::embedded_date_model();
  for (const std::string bad : {std::string("21 Nov\x1b[31m 2026"), std::string("21\tNov 2026"),
                                std::string("21 Nov 2026\xc2\x85"), std::string("21 Nov\x7f")}) {
    try {
      models::translate_dates(model, {"21.11.2026", bad});
      ADD_FAILURE() << "no error for a control character";
    } catch (const qkv::Error& e) {
      EXPECT_NE(std::string(e.what()).find("translate: input 2 has a control character"),
                std::string::npos) << e.what();
    }
  }
}

}  // namespace

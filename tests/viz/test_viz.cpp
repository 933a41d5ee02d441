// qkv::viz: the HTML page's embedded data parses back to the inputs, text is escaped for
// HTML, JS and XML, the page fetches nothing, the SVG is well-formed, and bad input throws.
// (tests/viz/test_browser.sh runs a real page in headless Chromium.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/rng.h"
#include "qkv/viz.h"

namespace qkv::viz {
namespace {

using json = nlohmann::json;

// (H, Lq, Lk) rows of a softmax of random scores, so every row sums to 1.
Tensor random_probs(std::int64_t H, std::int64_t Lq, std::int64_t Lk, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<std::size_t>(H * Lq * Lk));
  for (std::size_t r = 0; r < v.size(); r += static_cast<std::size_t>(Lk)) {
    double total = 0;
    for (std::int64_t j = 0; j < Lk; ++j) {
      // Scores in [-6, 6): probabilities from about 1e-5 to near 1.
      v[r + static_cast<std::size_t>(j)] = static_cast<float>(std::exp(12 * rng.uniform() - 6));
      total += v[r + static_cast<std::size_t>(j)];
    }
    for (std::int64_t j = 0; j < Lk; ++j)
      v[r + static_cast<std::size_t>(j)] = static_cast<float>(v[r + static_cast<std::size_t>(j)] / total);
  }
  return Tensor::from_vector({H, Lq, Lk}, v);
}

AttentionView sample_view() {
  AttentionView view;
  view.title = "model <b>&\"'";
  view.subtitle = "the cat sat";
  AttentionGroup self;
  self.name = "encoder self-attention";
  self.query_tokens = {"[CLS]", "the", "cat", "[SEP]"};
  self.key_tokens = self.query_tokens;
  self.layers.push_back(random_probs(3, 4, 4, 1));
  // A strided layer: the transpose of a (H, Lk, Lq) tensor's last two dimensions.
  self.layers.push_back(random_probs(3, 4, 4, 2).transpose(1, 2).contiguous().transpose(1, 2));
  AttentionGroup cross;
  cross.name = "cross-attention";
  cross.query_tokens = {"<s>", "le", "chat"};
  cross.key_tokens = {"the", "cat", "sat", "on", "年"};
  cross.layers.push_back(random_probs(2, 3, 5, 3));
  cross.layers.push_back(random_probs(2, 3, 5, 4));
  cross.layers.push_back(random_probs(2, 3, 5, 5));
  view.groups = {self, cross};
  return view;
}

constexpr std::string_view kDataOpen = R"(<script type="application/json" id="qkv-attention-data">)";

// The text of the data element (up to the first "</script" after it).
std::string data_text(const std::string& page) {
  const std::size_t open = page.find(kDataOpen);
  EXPECT_NE(open, std::string::npos) << "no data element";
  if (open == std::string::npos) return {};
  const std::size_t start = open + kDataOpen.size();
  const std::size_t end = page.find("</script", start);
  EXPECT_NE(end, std::string::npos) << "data element not closed";
  return page.substr(start, end - start);
}

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// EXPECT that f throws qkv::Error whose message contains every needle.
void expect_error(const std::function<void()>& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no qkv::Error thrown (expected one naming '" << needles.front() << "')";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const auto& n : needles)
      EXPECT_NE(message.find(n), std::string::npos) << "message '" << message << "' lacks '" << n << "'";
  }
}

TEST(VizHtml, EmbeddedDataEqualsTheInputs) {
  const AttentionView view = sample_view();
  const std::string page = render_html(view);
  const json data = json::parse(data_text(page));
  EXPECT_EQ(data.at("title").get<std::string>(), view.title);
  EXPECT_EQ(data.at("subtitle").get<std::string>(), view.subtitle);
  ASSERT_EQ(data.at("groups").size(), view.groups.size());
  double worst = 0;
  for (std::size_t g = 0; g < view.groups.size(); ++g) {
    const AttentionGroup& want = view.groups[g];
    const json& got = data["groups"][g];
    EXPECT_EQ(got.at("name").get<std::string>(), want.name);
    EXPECT_EQ(got.at("query_tokens").get<std::vector<std::string>>(), want.query_tokens);
    EXPECT_EQ(got.at("key_tokens").get<std::vector<std::string>>(), want.key_tokens);
    const json& a = got.at("attention");  // [layer][head][query][key]
    ASSERT_EQ(a.size(), want.layers.size());
    for (std::size_t n = 0; n < want.layers.size(); ++n) {
      const Tensor& t = want.layers[n];  // (H, Lq, Lk)
      ASSERT_EQ(static_cast<std::int64_t>(a[n].size()), t.size(0));
      for (std::int64_t h = 0; h < t.size(0); ++h) {
        ASSERT_EQ(static_cast<std::int64_t>(a[n][h].size()), t.size(1));
        for (std::int64_t i = 0; i < t.size(1); ++i) {
          ASSERT_EQ(static_cast<std::int64_t>(a[n][h][i].size()), t.size(2));
          for (std::int64_t j = 0; j < t.size(2); ++j) {
            const double p = t.get({h, i, j});
            const double q = a[n][h][i][j].get<double>();
            // 6 significant digits: a relative error of at most 5e-6 (half a unit in the
            // 6th digit), plus float-to-decimal slack.
            EXPECT_LE(std::abs(q - p), 5.0001e-6 * std::abs(p))
                << "group " << g << " layer " << n << " [" << h << "," << i << "," << j << "]";
            worst = std::max(worst, std::abs(q - p));
          }
        }
      }
    }
  }
  EXPECT_LT(worst, 1e-5);  // what the browser test relies on
}

TEST(VizHtml, InitialGroupHeadAndTextLabelsEmbedded) {
  AttentionView view = sample_view();
  json data = json::parse(data_text(render_html(view)));
  EXPECT_EQ(data.at("initial_group").get<int>(), 0);  // the defaults
  EXPECT_EQ(data.at("initial_head").get<int>(), 0);
  EXPECT_FALSE(data["groups"][0].at("text_labels").get<bool>());
  view.initial_group = 1;
  view.initial_head = 1;
  view.groups[1].text_labels = true;
  data = json::parse(data_text(render_html(view)));
  EXPECT_EQ(data.at("initial_group").get<int>(), 1);
  EXPECT_EQ(data.at("initial_head").get<int>(), 1);
  EXPECT_FALSE(data["groups"][0].at("text_labels").get<bool>());
  EXPECT_TRUE(data["groups"][1].at("text_labels").get<bool>());
}

TEST(VizHtml, InitialGroupAndHeadOutOfRangeAreNamed) {
  AttentionView v = sample_view();  // group 0: 3 heads, group 1: 2 heads
  v.initial_group = 2;
  expect_error([&] { render_html(v); }, {"render_html: initial_group is 2", "2 groups (0-1)"});
  v.initial_group = 1;
  v.initial_head = 2;  // head 2 exists in group 0, not in group 1
  expect_error([&] { render_html(v); },
               {"initial_head is 2", "group 1 ('cross-attention') (initial_group) has 2 heads (0-1)"});
  v.initial_head = -1;
  expect_error([&] { render_html(v); }, {"initial_head is -1"});
  v.initial_group = 0;
  v.initial_head = 2;
  EXPECT_NO_THROW(render_html(v));
}

TEST(VizTitle, NamesTheKindAndTheDirectoryBaseName) {
  EXPECT_EQ(page_title("GPT-2", "/any/where/models/sotu-gpt"), "GPT-2 \xC2\xB7 sotu-gpt");
  EXPECT_EQ(page_title("GPT-2", "models/sotu-gpt/"), "GPT-2 \xC2\xB7 sotu-gpt");
  EXPECT_EQ(page_title("BERT", "a/bert-dir/../bert-dir//"), "BERT \xC2\xB7 bert-dir");
  EXPECT_EQ(page_title("date translator", ""), "date translator");
  // "." names the working directory: its base name, never "." or a path.
  const std::string here = page_title("BERT", ".");
  EXPECT_EQ(here, "BERT \xC2\xB7 " + std::filesystem::current_path().filename().string());
  EXPECT_EQ(here.find('/'), std::string::npos) << here;
}

TEST(VizHtml, TokensAreEscapedForHtmlAndScript) {
  const std::vector<std::string> tricky = {"</script><b>&\"'", "<!--", "年", "a\nb\tc", "]]>",
                                           "</SCRIPT >", "\\u003c", "x"};
  AttentionView view;
  view.title = "</script><script>alert(1)</script>";
  view.subtitle = "<i>&amp;</i>";
  AttentionGroup g;
  g.name = "self <&>";
  g.query_tokens = tricky;
  g.key_tokens = tricky;
  g.layers.push_back(random_probs(2, 8, 8, 7));
  view.groups.push_back(g);
  const std::string page = render_html(view);

  const std::string data = data_text(page);
  EXPECT_EQ(data.find('<'), std::string::npos) << "a raw '<' inside the data element";
  EXPECT_EQ(data.find('>'), std::string::npos);
  EXPECT_EQ(data.find('&'), std::string::npos);
  const json parsed = json::parse(data);
  EXPECT_EQ(parsed["title"].get<std::string>(), view.title);
  EXPECT_EQ(parsed["subtitle"].get<std::string>(), view.subtitle);
  EXPECT_EQ(parsed["groups"][0]["name"].get<std::string>(), g.name);
  EXPECT_EQ(parsed["groups"][0]["query_tokens"].get<std::vector<std::string>>(), tricky);
  EXPECT_EQ(parsed["groups"][0]["key_tokens"].get<std::vector<std::string>>(), tricky);
  // Exactly the two script elements end: the data and the drawing code.
  EXPECT_EQ(count(page, "</script"), 2u);
  EXPECT_EQ(count(page, "<script"), 2u);
  // The title in markup is escaped (in <title> and <h1>); non-ASCII stays UTF-8.
  EXPECT_NE(page.find("<title>&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(page.find("<p class=\"sub\">&lt;i&gt;&amp;amp;&lt;/i&gt;</p>"), std::string::npos);
  EXPECT_NE(data.find("年"), std::string::npos);
}

TEST(VizHtml, InvalidUtf8BecomesReplacementCharacter) {
  AttentionView view;
  view.title = "t";
  AttentionGroup g;
  g.name = "g";
  g.query_tokens = {"ok", "\xFF", "\xE5\xB9"};  // a stray byte; 年 cut short
  g.key_tokens = {"\xC0\xAF"};                   // an overlong '/'
  g.layers.push_back(Tensor::full({1, 3, 1}, 1.0f));
  view.groups.push_back(g);
  const json parsed = json::parse(data_text(render_html(view)));
  EXPECT_EQ(parsed["groups"][0]["query_tokens"],
            json({"ok", "\xEF\xBF\xBD", "\xEF\xBF\xBD\xEF\xBF\xBD"}));
  EXPECT_EQ(parsed["groups"][0]["key_tokens"], json({"\xEF\xBF\xBD\xEF\xBF\xBD"}));
}

TEST(VizHtml, SelfContainedWithNoNetworkAccess) {
  const std::string page = render_html(sample_view());
  for (const char* needle : {"http:", "https:", "//cdn", " src=", " href=", "@import", "url(",
                             "fetch(", "XMLHttpRequest", "import(", "WebSocket", "<link", "<img",
                             "<iframe"}) {
    EXPECT_EQ(page.find(needle), std::string::npos) << "the page contains '" << needle << "'";
  }
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("<meta charset=\"utf-8\">"), std::string::npos);
  EXPECT_NE(page.find("body.dataset.rendered = \"1\""), std::string::npos);
  EXPECT_EQ(count(page, "<style>"), 1u);
  EXPECT_NE(page.find("</html>"), std::string::npos);
}

// A minimal XML checker: tags balance, attribute values are quoted, and text and attribute
// values hold no raw '<' and only the five predefined entities or numeric references.
// Returns "" when well-formed, else what is wrong.
std::string xml_problem(const std::string& s) {
  std::vector<std::string> stack;
  std::size_t i = 0;
  auto check_text = [&](std::size_t from, std::size_t to) -> std::string {
    for (std::size_t k = from; k < to; ++k) {
      if (s[k] == '<') return "raw '<' at " + std::to_string(k);
      if (s[k] == '&') {
        const std::size_t semi = s.find(';', k);
        if (semi == std::string::npos || semi > to) return "unterminated entity at " + std::to_string(k);
        const std::string e = s.substr(k + 1, semi - k - 1);
        if (e != "amp" && e != "lt" && e != "gt" && e != "quot" && e != "apos" && e.rfind('#', 0) != 0)
          return "unknown entity &" + e + "; at " + std::to_string(k);
      }
      const auto c = static_cast<unsigned char>(s[k]);
      if (c < 0x20 && c != '\n' && c != '\t' && c != '\r') return "control character in text";
    }
    return "";
  };
  bool root_seen = false;
  while (i < s.size()) {
    const std::size_t lt = s.find('<', i);
    const std::size_t text_end = lt == std::string::npos ? s.size() : lt;
    if (auto p = check_text(i, text_end); !p.empty()) return p;
    if (lt == std::string::npos) break;
    if (s.compare(lt, 5, "<?xml") == 0) {
      if (lt != 0) return "XML declaration not at the start";
      i = s.find("?>", lt) + 2;
      continue;
    }
    const std::size_t gt = s.find('>', lt);
    if (gt == std::string::npos) return "unterminated tag";
    std::string tag = s.substr(lt + 1, gt - lt - 1);
    if (!tag.empty() && tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name) return "</" + name + "> closes nothing open";
      stack.pop_back();
    } else {
      const bool self_closing = !tag.empty() && tag.back() == '/';
      if (self_closing) tag.pop_back();
      const std::string name = tag.substr(0, tag.find_first_of(" \n\t"));
      if (name.empty()) return "empty tag name";
      if (stack.empty() && root_seen) return "a second root element <" + name + ">";
      root_seen = true;
      // Attributes: name="value" pairs with escaped values.
      std::size_t k = name.size();
      while (k < tag.size()) {
        while (k < tag.size() && (tag[k] == ' ' || tag[k] == '\n' || tag[k] == '\t')) ++k;
        if (k >= tag.size()) break;
        const std::size_t eq = tag.find('=', k);
        if (eq == std::string::npos || eq + 1 >= tag.size() || tag[eq + 1] != '"')
          return "unquoted attribute in <" + name + ">";
        const std::size_t close = tag.find('"', eq + 2);
        if (close == std::string::npos) return "unterminated attribute in <" + name + ">";
        const std::size_t base = lt + 1;
        if (auto p = check_text(base + eq + 2, base + close); !p.empty()) return p;
        k = close + 1;
      }
      if (!self_closing) stack.push_back(name);
    }
    i = gt + 1;
  }
  if (!stack.empty()) return "<" + stack.back() + "> never closed";
  if (!root_seen) return "no root element";
  return "";
}

TEST(VizSvg, WellFormedWithEscapedLabelsAndATitle) {
  AttentionGroup g;
  g.name = "cross <attention> & co";
  g.query_tokens = {"</script><b>&\"'", "年", "a\nb"};
  g.key_tokens = {"x", "]]>", "it's", "\x01"};
  g.layers.push_back(random_probs(2, 3, 4, 11));
  g.layers.push_back(random_probs(2, 3, 4, 12));
  const std::string svg = render_svg(g, 1, 1);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(svg.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("cross &lt;attention&gt; &amp; co \xE2\x80\x94 layer 1, head 1"), std::string::npos);
  EXPECT_NE(svg.find("&lt;/script&gt;&lt;b&gt;&amp;&quot;&#39;"), std::string::npos);
  EXPECT_NE(svg.find(">年<"), std::string::npos);
  EXPECT_NE(svg.find("a\xE2\x90\x8A" "b"), std::string::npos);  // "\n" as ␊
  EXPECT_NE(svg.find(">\xE2\x90\x81<"), std::string::npos);     // "\x01" as ␁
  // One cell per (query, key), each with its value as a tooltip.
  EXPECT_EQ(count(svg, "<rect x="), 3u * 4u + 2u);  // cells, the grid frame, the colour bar
  EXPECT_EQ(count(svg, "</title></rect>"), 12u);
  // The value of cell (2, 3) of layer 1, head 1, to 6 digits.
  const float p = g.layers[1].get({1, 2, 3});
  char want[32];
  std::snprintf(want, sizeof want, "%.6g</title>", static_cast<double>(p));
  EXPECT_NE(svg.find(want), std::string::npos) << want;
  EXPECT_NE(svg.find("url(#scale)"), std::string::npos);  // the colour scale
}

TEST(VizSvg, TextLabelsKeepTheirSpaces) {
  AttentionGroup g;
  g.name = "history";
  g.query_tokens = g.key_tokens = {"Toy Story (1995)", "Heat (1995)"};
  g.layers.push_back(random_probs(1, 2, 2, 3));
  EXPECT_NE(render_svg(g, 0, 0).find("Toy\xE2\x90\xA3Story"), std::string::npos);  // tokens: ␣
  g.text_labels = true;
  const std::string svg = render_svg(g, 0, 0);
  EXPECT_NE(svg.find(">Toy Story (1995)<"), std::string::npos);
  EXPECT_EQ(svg.find("\xE2\x90\xA3"), std::string::npos);
}

TEST(VizSvg, LayerAndHeadOutOfRange) {
  AttentionGroup g;
  g.name = "self";
  g.query_tokens = g.key_tokens = {"a", "b"};
  g.layers.push_back(random_probs(2, 2, 2, 1));
  expect_error([&] { render_svg(g, 1, 0); }, {"layer must be in [0, 1), got 1"});
  expect_error([&] { render_svg(g, -1, 0); }, {"layer must be in [0, 1), got -1"});
  expect_error([&] { render_svg(g, 0, 2); }, {"head must be in [0, 2), got 2"});
  EXPECT_EQ(xml_problem(render_svg(g, 0, 1)), "");
}

TEST(VizErrors, InconsistentInputsName) {
  const AttentionView good = sample_view();
  EXPECT_NO_THROW(render_html(good));

  AttentionView v = good;
  v.groups.clear();
  expect_error([&] { render_html(v); }, {"no attention groups"});

  v = good;
  v.groups[1].layers.clear();
  expect_error([&] { render_html(v); }, {"group 1 ('cross-attention')", "has no layers"});

  v = good;
  v.groups[0].query_tokens.clear();
  v.groups[0].layers = {Tensor::zeros({3, 0, 4})};
  expect_error([&] { render_html(v); }, {"query_tokens is empty"});

  v = good;
  v.groups[0].layers[1] = Tensor::zeros({4, 4});
  expect_error([&] { render_html(v); }, {"group 0", "layer 1", "3-D (H, Lq, Lk)", "(4, 4)"});

  v = good;
  v.groups[0].layers[1] = Tensor::zeros({1, 3, 4, 4});
  expect_error([&] { render_html(v); }, {"layer 1", "3-D", "(1, 3, 4, 4)"});

  v = good;
  v.groups[1].query_tokens.pop_back();
  expect_error([&] { render_html(v); }, {"group 1", "Lq", "2 query tokens", "(2, 3, 5)"});

  v = good;
  v.groups[1].key_tokens.push_back("extra");
  expect_error([&] { render_html(v); }, {"group 1", "Lk", "6 key tokens", "(2, 3, 5)"});

  v = good;
  v.groups[1].layers[2] = random_probs(3, 3, 5, 9);
  expect_error([&] { render_html(v); }, {"layer 2", "3 heads, layer 0 has 2"});

  v = good;
  v.groups[0].layers[0] = Tensor::zeros({0, 4, 4});
  expect_error([&] { render_html(v); }, {"no heads"});

  v = good;
  v.groups[0].layers[0] = Tensor();
  expect_error([&] { render_html(v); }, {"layer 0", "undefined"});

  const float bad_values[] = {std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity(), -0.25f, 1.5f};
  for (const float bad : bad_values) {
    v = good;
    Tensor t = v.groups[1].layers[1].clone();
    t.set({1, 2, 3}, bad);
    v.groups[1].layers[1] = t;
    expect_error([&] { render_html(v); },
                 {"group 1", "layer 1", "[head 1, query 2, key 3]", "finite value in [0, 1]"});
    expect_error([&] { render_svg(v.groups[1], 0, 0); }, {"render_svg", "layer 1", "[head 1, query 2, key 3]"});
  }
}

TEST(VizWriteFile, WritesAndNamesThePathOnFailure) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("qkv_viz_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "page.html").string();
  const std::string text = std::string("<p>年</p>\n") + std::string(1, '\0') + "end";
  write_file(path, text);
  std::ifstream in(path, std::ios::binary);
  std::stringstream got;
  got << in.rdbuf();
  EXPECT_EQ(got.str(), text);
  write_file(path, "short");  // replaces, not appends
  std::ifstream again(path, std::ios::binary);
  std::stringstream got2;
  got2 << again.rdbuf();
  EXPECT_EQ(got2.str(), "short");
  std::filesystem::remove_all(dir);

  const std::string missing = (dir / "no" / "such" / "dir.html").string();
  expect_error([&] { write_file(missing, "x"); }, {"cannot write '" + missing + "'", "No such file"});
}

// The image page (render_image_html): its embedded data equals the inputs, text is escaped
// for the <script> element, and inconsistent views are refused naming the image.
qkv::viz::ImageAttentionView image_view() {
  qkv::viz::ImageAttentionView v;
  v.title = "images </script><b>";
  v.subtitle = "two images";
  for (int n = 0; n < 2; ++n) {
    qkv::viz::ImageAttention im;
    im.caption = n ? "#1 Bag 0.5 & more" : "#0 Sneaker 0.98";
    im.height = 4;
    im.width = 6;
    for (int k = 0; k < 24; ++k) im.pixels.push_back(static_cast<std::uint8_t>(k * 10 + n));
    im.grid_h = 2;
    im.grid_w = 3;
    im.heat = {0.1f, 0.2f, 0.0f, 0.05f, 0.3f, 0.125f};
    v.images.push_back(im);
  }
  return v;
}

std::string image_data_text(const std::string& page) {
  const std::string open = "<script type=\"application/json\" id=\"qkv-image-data\">";
  const auto a = page.find(open);
  const auto b = page.find("</script>", a);
  EXPECT_NE(a, std::string::npos);
  return page.substr(a + open.size(), b - a - open.size());
}

TEST(VizImages, EmbeddedDataEqualsTheInputs) {
  const qkv::viz::ImageAttentionView v = image_view();
  const std::string page = qkv::viz::render_image_html(v);
  const json data = json::parse(image_data_text(page));
  EXPECT_EQ(data.at("title").get<std::string>(), v.title);
  ASSERT_EQ(data.at("images").size(), 2u);
  for (std::size_t n = 0; n < 2; ++n) {
    const json& im = data["images"][n];
    EXPECT_EQ(im.at("caption").get<std::string>(), v.images[n].caption);
    EXPECT_EQ(im.at("pixels").get<std::vector<int>>(), std::vector<int>(v.images[n].pixels.begin(), v.images[n].pixels.end()));
    EXPECT_EQ(im.at("grid_w").get<int>(), 3);
    EXPECT_EQ(im.at("heat").get<std::vector<float>>(), v.images[n].heat);
  }
  EXPECT_EQ(page.find("</script><b>"), std::string::npos) << "the title must not close an element";
  EXPECT_EQ(page.find("http://"), std::string::npos);
  EXPECT_EQ(page.find("https://"), std::string::npos);
}

TEST(VizImages, InconsistentViewsNamed) {
  qkv::viz::ImageAttentionView v;
  expect_error([&] { qkv::viz::render_image_html(v); }, {"no images"});
  v = image_view();
  v.images[1].pixels.pop_back();
  expect_error([&] { qkv::viz::render_image_html(v); }, {"image 1", "23 pixels for 4x6"});
  v = image_view();
  v.images[0].heat.push_back(0.0f);
  expect_error([&] { qkv::viz::render_image_html(v); }, {"image 0", "7 heat values for a 2x3 grid"});
  v = image_view();
  v.images[0].heat[2] = -1.0f;
  expect_error([&] { qkv::viz::render_image_html(v); }, {"heat value 2", "must be finite and >= 0"});
  v = image_view();
  v.images[0].heat[1] = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { qkv::viz::render_image_html(v); }, {"heat value 1"});
  v = image_view();
  v.images[0].grid_h = 5;
  v.images[0].heat.assign(15, 0.1f);
  expect_error([&] { qkv::viz::render_image_html(v); }, {"grid over 4x6"});
}

// A point model's image: 3 points, each with 2 neighbours.
qkv::viz::ImageAttentionView point_view() {
  qkv::viz::ImageAttentionView v = image_view();
  v.images.resize(1);
  ImageAttention& im = v.images[0];
  im.grid_h = im.grid_w = 0;
  im.heat.clear();
  im.points = {0.0f, 0.0f, 5.0f, 3.0f, 2.5f, 1.0f};  // (column, row)
  im.point_heat = {0.2f, 0.5f, 0.3f};
  im.neighbors = 2;
  im.neighbor = {0, 2, 1, 2, 2, 0};
  im.neighbor_weight = {0.75f, 0.25f, 0.5f, 0.5f, 1.0f, 0.0f};
  return v;
}

TEST(VizImages, PointsAndTheirNeighboursEmbedded) {
  const qkv::viz::ImageAttentionView v = point_view();
  const json im = json::parse(image_data_text(qkv::viz::render_image_html(v)))["images"][0];
  EXPECT_EQ(im.at("points").get<std::vector<float>>(), v.images[0].points);
  EXPECT_EQ(im.at("point_heat").get<std::vector<float>>(), v.images[0].point_heat);
  EXPECT_EQ(im.at("neighbors").get<int>(), 2);
  EXPECT_EQ(im.at("neighbor").get<std::vector<std::int64_t>>(), v.images[0].neighbor);
  EXPECT_EQ(im.at("neighbor_weight").get<std::vector<float>>(), v.images[0].neighbor_weight);
  EXPECT_FALSE(im.contains("heat"));
}

TEST(VizImages, InconsistentPointViewsNamed) {
  qkv::viz::ImageAttentionView v = point_view();
  v.images[0].heat = {0.1f};
  v.images[0].grid_h = v.images[0].grid_w = 1;
  expect_error([&] { qkv::viz::render_image_html(v); }, {"image 0", "not both"});
  v = point_view();
  v.images[0].points.clear();
  expect_error([&] { qkv::viz::render_image_html(v); }, {"not neither"});
  v = point_view();
  v.images[0].points[2] = 6.0f;  // column 6 of a 6-wide image
  expect_error([&] { qkv::viz::render_image_html(v); }, {"point 1 at (6, 3)", "outside the 6x4 image"});
  v = point_view();
  v.images[0].point_heat.pop_back();
  expect_error([&] { qkv::viz::render_image_html(v); }, {"6 point coordinates and 2 heat values"});
  v = point_view();
  v.images[0].neighbor[3] = 3;
  expect_error([&] { qkv::viz::render_image_html(v); }, {"neighbour 3 is point 3", "outside [0, 3)"});
  v = point_view();
  v.images[0].neighbor_weight[4] = 1.5f;
  expect_error([&] { qkv::viz::render_image_html(v); }, {"neighbour weight 4 is 1.5"});
  v = point_view();
  v.images[0].neighbor.pop_back();
  expect_error([&] { qkv::viz::render_image_html(v); }, {"5 neighbours and 6 weights for 3 points x 2"});
  v = point_view();
  v.images[0].point_heat[0] = -0.5f;
  expect_error([&] { qkv::viz::render_image_html(v); }, {"heat value 0 is -0.5"});
}

}  // namespace
}  // namespace qkv::viz


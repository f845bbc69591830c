#include "launcher/depfile.h"

namespace kiln::launcher {

Result<std::vector<DepRule>> parse_depfile(std::string_view text) {
  std::vector<DepRule> rules;
  bool in_targets = true;  // before the current rule's ':'
  bool new_rule = true;    // the next target starts a rule
  std::string word;
  bool have_word = false;
  auto end_word = [&]() {
    if (!have_word) return;
    if (in_targets) {
      if (new_rule) rules.emplace_back();
      new_rule = false;
      rules.back().targets.push_back(std::move(word));
    } else {
      rules.back().prerequisites.push_back(std::move(word));
    }
    word.clear();
    have_word = false;
  };
  auto end_line = [&]() -> Status {
    end_word();
    if (in_targets && !new_rule) return Status(StatusCode::kInvalidArgument, "a line of targets with no ':'");
    in_targets = true;
    new_rule = true;
    return {};
  };
  auto add = [&](char c) {
    word += c;
    have_word = true;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    char n = i + 1 < text.size() ? text[i + 1] : '\0';
    if (c == '\\' && n == '\n') {  // a continued line
      end_word();
      ++i;
    } else if (c == '\\' && n == '\r' && i + 2 < text.size() && text[i + 2] == '\n') {
      end_word();
      i += 2;
    } else if (c == '\\') {
      // As GCC writes (and ninja and make read) a name: a run of backslashes before a blank or a
      // '#' is doubled, and one more escapes that character; anywhere else a backslash is itself.
      size_t run = 1;
      while (i + run < text.size() && text[i + run] == '\\') ++run;
      char after = i + run < text.size() ? text[i + run] : '\0';
      if (after == ' ' || after == '\t' || after == '#') {
        word.append(run / 2, '\\');
        have_word = true;
        if (run % 2) {
          add(after);
          i += run;  // the escaped character too
        } else {
          i += run - 1;  // the character after the run ends the word (or starts a comment)
        }
      } else if (after == ':' && run == 1) {
        add(':');
        ++i;
      } else {
        word.append(run, '\\');
        have_word = true;
        i += run - 1;
      }
    } else if (c == '$' && n == '$') {
      add('$');
      ++i;
    } else if (c == '\n') {
      KILN_RETURN_IF_ERROR(end_line());
    } else if (c == ' ' || c == '\t' || c == '\r') {
      end_word();
    } else if (c == ':' && in_targets && (n == '\0' || n == ' ' || n == '\t' || n == '\n' || n == '\r' || n == '\\')) {
      end_word();
      if (new_rule) return Status(StatusCode::kInvalidArgument, "a ':' with no target before it");
      in_targets = false;
    } else {
      add(c);
    }
  }
  KILN_RETURN_IF_ERROR(end_line());
  return rules;
}

std::string render_depfile(const std::vector<DepRule>& rules) {
  auto escape = [](const std::string& name) {
    std::string out;
    size_t backslashes = 0;  // the run just written
    for (char c : name) {
      if (c == ' ' || c == '\t' || c == '#') {
        out.append(backslashes, '\\');  // the run doubled, then one more for the character
        out += '\\';
      }
      if (c == '$') out += '$';
      out += c;
      backslashes = c == '\\' ? backslashes + 1 : 0;
    }
    return out;
  };
  std::string out;
  for (auto& r : rules) {
    for (size_t i = 0; i < r.targets.size(); ++i) out += (i ? " " : "") + escape(r.targets[i]);
    out += ":";
    for (auto& p : r.prerequisites) out += " \\\n  " + escape(p);
    out += "\n";
  }
  return out;
}

}  // namespace kiln::launcher

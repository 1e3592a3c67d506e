// Writes the Jinja fuzzer's seed corpus into the directory given as argv[1]:
// small templates, one or a few constructs each, and the malformed ones the
// conformance suite expects to fail (tests/template/constructs.py); scripts/fuzz
// adds the family templates of tests/fixtures/chat_templates/.

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace {

std::vector<std::pair<std::string, std::string>> seeds() {
  return {
      {"chatml",
       "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
       "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
       "{% endif %}"},
      {"loop",
       "{% for m in messages if m.role != 'tool' %}{{ loop.index }}/{{ loop.length }}{{ loop.cycle('a','b') "
       "}}"
       "{% if loop.last %}.{% endif %}{% else %}none{% endfor %}"},
      {"namespace",
       "{%- set ns = namespace(i=0, s='') -%}\n{%- for m in messages[::-1] %}\n  {%- set ns.i = ns.i + 1 "
       "%}{% set ns.s = ns.s ~ m.role[0] %}\n{%- endfor %}{{ ns.i }}{{ ns.s }}"},
      {"macro",
       "{% macro r(x, d=0) %}{% if x is mapping %}{% for k, v in x.items() %}{{ k }}:{{ r(v, d + 1) }}"
       "{% endfor %}{% else %}{{ x | tojson }}{% endif %}{% endmacro %}{{ r(messages[2]) }}"},
      {"filters",
       "{{ messages | map(attribute='content') | select('string') | map('trim') | join('|') | upper }}"
       "{{ tools | tojson(indent=2) }}{{ s | indent(2, true) }}{{ [3,1,2] | sort | unique | list }}"
       "{{ {'b': 1, 'a': 2} | dictsort }}{{ -2.5 | abs | round }}{{ '7' | int + '1.5' | float }}"},
      {"tests",
       "{{ n is odd }}{{ n is divisibleby 3 }}{{ x is defined }}{{ none is none }}{{ s is string }}"
       "{{ messages is sequence }}{{ 'a' is in 'abc' }}{{ n is equalto 3 }}"},
      {"strings",
       "{{ s.strip().split('\\n') }}{{ s.replace('a', 'b') }}{{ s.startswith('a') }}{{ s[1:-1] }}"
       "{{ '{} {}'.format(1, 'x') }}{{ s.title() }}{{ 'x' ~ 1 ~ none }}"},
      {"whitespace",
       "a\n    {% if true %}\n  b  {{- ' c ' -}}  \n{%- endif %}\n{# c #}\n{% raw %}{{ x }}{% endraw %}"},
      {"set_block",
       "{% set x %}{{ n * 2 }}{% endset %}{% filter upper %}{{ x }}{% endfilter %}{% generation %}g"
       "{% endgeneration %}"},
      {"break",
       "{% for i in range(10) %}{% if i > 3 %}{% break %}{% endif %}{% if i is odd %}{% continue %}"
       "{% endif %}{{ i }}{% endfor %}"},
      {"raise", "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}"},
      {"recursion", "{% macro m(k) %}{{ m(k + 1) }}{% endmacro %}{{ m(0) }}"},
      {"big_output", "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"},
      {"deep_parens", std::string(300, '(') + "1" + std::string(300, ')')},
      {"deep_list", "{% set x = [] %}{% for i in range(1000) %}{% set x = [x] %}{% endfor %}{{ x }}"},
      {"unclosed", "{% for x in messages %}{{ x"},
      {"bad_end", "{% if true %}{% endfor %}"},
      {"context_after_nul", std::string("{{ a.b }}{{ a | tojson }}\0", 27) + R"({"a": {"b": [1, "x"]}})"},
  };
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  for (const auto& [name, body] : seeds()) {
    std::ofstream f(std::string(argv[1]) + "/" + name + ".jinja", std::ios::binary);
    f << body;
  }
  return 0;
}

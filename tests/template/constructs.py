"""Templates written for the conformance suite (test_chat_template_conformance.py),
each exercising one or a few Jinja constructs, rendered with DATA by both
jinja2 and nanoserve. ERRORS must fail in both."""

DATA = {
    "messages": [
        {"role": "system", "content": "  Be brief.\n"},
        {"role": "user", "content": "Hello, World"},
        {"role": "assistant", "content": "Hi there", "tool_calls": [
            {"function": {"name": "f", "arguments": {"b": 2, "a": [1, "x", None, True, 1.5]}}}]},
        {"role": "user", "content": "Ünïcödé ✓ 日本"},
    ],
    "tools": [{"name": "f", "description": "does f", "parameters": {"type": "object", "properties": {}}}],
    "add_generation_prompt": True,
    "bos_token": "<s>",
    "eos_token": "</s>",
    "n": 7,
    "neg": -3,
    "f": 2.5,
    "big": 12345678901234,
    "tiny": 1e-07,
    "s": "  The quick brown fox  ",
    "words": ["delta", "Alpha", "charlie", "bravo", "alpha"],
    "nums": [3, 1, 2, 10, -4],
    "d": {"z": 1, "a": {"nested": [1, 2]}, "m": "text"},
    "people": [{"name": "ann", "age": 31, "admin": True}, {"name": "bob", "age": 25, "admin": False},
               {"name": "cy", "age": 40}],
    "empty": [],
    "nothing": None,
    "t": True,
    "text": "line one\nline two\n\nline four",
}

C = []  # (name, template)


def add(name, template):
    C.append((name, template))


# --- output, literals, whitespace ---
add("text_only", "plain text\nwith lines\n")
add("trailing_newline_dropped", "a\n")
add("two_trailing_newlines", "a\n\n")
add("crlf", "a\r\nb\rc\n{% if t %}\r\nx{% endif %}")
add("print_literals", "{{ 'a' }}{{ \"b\" }}{{ 1 }}{{ 1.5 }}{{ true }}{{ none }}{{ True }}{{ False }}")
add("string_escapes", r"{{ 'tab\there\nnl \\ \' \" \x41 \u00e9 \U0001F600' }}")
add("adjacent_strings", "{{ 'a' 'b' \"c\" }}")
add("numbers", "{{ 1_000 }} {{ 2.50 }} {{ 1e3 }} {{ 1.5e-3 }} {{ 3 / 2 }} {{ 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }}")
add("modulo", "{{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7.5 % 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2.0 ** 3 }}")
add("float_repr", "{{ tiny }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 123456789.123 }} {{ -0.0 }} {{ f * 2 }}")
add("int_ops", "{{ n + 1 }} {{ n - 10 }} {{ n * neg }} {{ big * 3 }} {{ -n }} {{ +n }} {{ n + f }}")
add("bool_arith", "{{ t + 1 }} {{ true * 3 }} {{ false - 1 }}")
add("trim_blocks", "{% if t %}\nyes\n{% endif %}\nafter")
add("lstrip_blocks", "line\n    {% if t %}\n    indented\n    {% endif %}\ndone")
add("lstrip_not_vars", "a\n    {{ 'x' }}\n  {% if t %}b{% endif %}")
add("minus_left", "a   \n\n  {%- if t %}b{% endif %}")
add("minus_right", "{% if t -%}   \n\n  b{% endif %}")
add("minus_both_vars", "x  {{- 'y' -}}  \n z")
add("plus_disables_lstrip", "a\n    {%+ if t %}b{% endif %}")
add("plus_disables_trim", "{% if t +%}\nb{% endif %}")
add("comment", "a{# a comment #}b\n{# line comment #}\nc")
add("comment_trim", "a\n  {#- strip -#}  \nb")
add("comment_in_line", "x {# mid #} y")
add("raw", "{% raw %}{{ not evaluated }}{% endraw %}")
add("raw_trim", "{%- raw -%}  {% x %}  {%- endraw %}\nafter")
add("brace_in_expr", "{{ {'a': {'b': 1}} }}")
add("dict_literal_in_tag", "{% set x = {'k': {'j': 2}} %}{{ x.k.j }}")
add("text_braces", "a { b } {c} %} }} {")
add("lone_percent", "100% sure")

# --- variables, attributes, subscripts ---
add("attr_and_item", "{{ messages[1].content }}|{{ messages[1]['role'] }}|{{ d.a.nested[1] }}")
add("missing_key_is_undefined", "[{{ d.nope }}][{{ messages[0].nope }}][{{ d['nope'] }}]")
add("negative_index", "{{ nums[-1] }} {{ words[-2] }} {{ s[-3] }}")
add("index_out_of_range", "[{{ nums[99] }}]")
add("int_attr", "{{ nums.0 }} {{ people.1.name }}")
add("slices", "{{ nums[1:3] }} {{ nums[:2] }} {{ nums[3:] }} {{ nums[::-1] }} {{ nums[::2] }} {{ nums[-2:] }}")
add("string_slices", "{{ s[2:5] }}|{{ s[::-1] }}|{{ 'héllo'[1:3] }}|{{ 'abc'[5:] }}")
add("slice_negative_step", "{{ nums[3:0:-1] }} {{ nums[-1:-4:-1] }}")
add("messages_slice", "{% for m in messages[1:] %}{{ m.role }} {% endfor %}")
add("undefined_prints_empty", "[{{ undefined_thing }}]")
add("none_prints_None", "{{ nothing }}")
add("list_print", "{{ nums }} {{ words }} {{ [1, 'a', none, true, 2.5] }}")
add("dict_print", "{{ d }} {{ {'a': 1, 2: 'b'} }}")
add("quote_repr", "{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'nl\\n'] }}")
add("unicode_index", "{{ messages[3].content[0] }}{{ messages[3].content[-1] }}{{ messages[3].content | length }}")

# --- operators ---
add("concat_tilde", "{{ 'a' ~ 1 ~ none ~ true ~ nums }}")
add("concat_plus", "{{ 'a' + 'b' }} {{ [1] + [2, 3] }}")
add("string_repeat", "{{ 'ab' * 3 }}{{ 2 * 'x' }}{{ 'q' * 0 }}|{{ [0] * 3 }}")
add("comparisons", "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 3 > 4 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 1 != 2 }} {{ [1, 2] < [1, 3] }}")
add("chained_compare", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1 == 1 }}")
add("in_not_in", "{{ 'ell' in 'hello' }} {{ 2 in nums }} {{ 'z' in d }} {{ 'q' not in d }} {{ 5 not in nums }}")
add("logic", "{{ true and false }} {{ 0 or 'x' }} {{ '' or none }} {{ 1 and 2 }} {{ not 0 }} {{ not nums }}")
add("logic_values", "{{ nums and words }} {{ empty or 'fallback' }}")
add("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 1 ~ 2 ~ 3 }} {{ 'a' ~ (1 + 2) }}")
add("concat_binds_tighter_than_plus", "{{ 'a' ~ 'b' + 'c' }} {{ 'x' + 'y' ~ 'z' }}")
add("filter_precedence", "{{ -3 | abs }} {{ 'a' ~ 'B' | lower }} {{ 'n' ~ 2 | string }}")
add("not_precedence", "{{ not 1 == 2 }} {{ not true and false }} {{ not none is none }}")
add("conditional_expr", "{{ 'y' if t else 'n' }} {{ 'y' if nothing else 'n' }} [{{ 'y' if nothing }}]")
add("nested_conditional", "{{ 'a' if n > 10 else 'b' if n > 5 else 'c' }}")
add("equality_types", "{{ 1 == '1' }} {{ none == none }} {{ [1, 2] == [1, 2] }} {{ {'a': 1} == {'a': 1} }} {{ true == 1 }}")
add("tuple", "{{ (1, 2) == (1, 2) }}{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}")

# --- if / for / set ---
add("if_elif_else", "{% for x in nums %}{% if x > 5 %}big{% elif x > 1 %}mid{% elif x == 1 %}one{% else %}small{% endif %} {% endfor %}")
add("if_no_scope", "{% if t %}{% set y = 5 %}{% endif %}{{ y }}")
add("for_loop_vars", "{% for x in words %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }} {% endfor %}")
add("for_prev_next", "{% for x in nums %}[{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}]{% endfor %}")
add("for_cycle", "{% for x in nums %}{{ loop.cycle('a', 'b', 'c') }}{% endfor %}")
add("for_else", "{% for x in empty %}x{% else %}none{% endfor %}{% for x in nums %}{% else %}never{% endfor %}")
add("for_filter", "{% for x in nums if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}")
add("for_dict_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}")
add("for_dict_keys", "{% for k in d %}{{ k }}{% endfor %}{% for k in d.keys() %}{{ k }}{% endfor %}{% for v in d.values() %}{{ v }}{% endfor %}")
add("for_items_filter", "{% for k, v in d | items %}{{ k }}{% endfor %}")
add("for_string", "{% for c in 'héllo' %}[{{ c }}]{% endfor %}")
add("for_undefined", "[{% for x in not_there %}x{% endfor %}]")
add("for_nested_loop", "{% for a in [1, 2] %}{% for b in [3, 4] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }};{% endfor %}")
add("for_scope", "{% set x = 1 %}{% for i in nums %}{% set x = i %}{% endfor %}{{ x }}")
add("for_scope_persists", "{% for i in [1, 2, 3] %}{% if i == 1 %}{% set v = 'set' %}{% endif %}[{{ v }}]{% endfor %}")
add("loop_var_after", "{% for i in nums %}{% endfor %}[{{ i }}]")
add("break_continue", "{% for x in nums %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 10 %}{% break %}{% endif %}{{ x }}{% endfor %}")
add("set_tuple", "{% set a, b = [1, 2] %}{{ b }}{{ a }}")
add("set_block", "{% set block %}inner {{ n }}\n{% endset %}[{{ block }}]")
add("set_block_trim", "{%- set block -%}\n  inner\n{%- endset -%}\n[{{ block }}]")
add("namespace", "{% set ns = namespace(count=0, items=[]) %}{% for x in nums %}{% set ns.count = ns.count + x %}{% endfor %}{{ ns.count }}{{ ns.items }}")
add("namespace_flag", "{% set ns = namespace(found=false) %}{% for m in messages %}{% if m.role == 'assistant' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}")
add("namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}")
add("reassign_messages", "{% set messages = messages[1:] %}{{ messages | length }}")
add("range", "{{ range(3) | list }} {{ range(1, 10, 3) | list }} {{ range(5, 0, -2) | list }} {{ range(0) | list }}")
add("dict_call", "{{ dict(a=1, b='x') }}")

# --- macros ---
add("macro_basic", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('ann') }} {{ greet('bob', '?') }} {{ greet(name='cy', punct='.') }}")
add("macro_missing_arg", "{% macro m(a, b) %}[{{ a }}][{{ b }}]{% endmacro %}{{ m(1) }}")
add("macro_recursion", "{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k }}*{{ fact(k - 1) }}{% endif %}{% endmacro %}{{ fact(5) }}")
add("macro_sees_globals", "{% macro m() %}{{ n }}{{ bos_token }}{% endmacro %}{{ m() }}")
add("macro_whitespace", "{% macro m(x) %}\n  value: {{ x }}\n{% endmacro %}\n{{ m(1) }}{{ m(2) }}")
add("macro_json_schema", """{%- macro render(p, depth) -%}
{%- for k, v in p.items() -%}
{{ '  ' * depth }}{{ k }}: {{ v.type | default('any') }}
{% if v.properties is defined %}{{ render(v.properties, depth + 1) }}{% endif %}
{%- endfor -%}
{%- endmacro -%}
{{ render({'a': {'type': 'object', 'properties': {'b': {'type': 'string'}, 'c': {}}}, 'z': {'type': 'int'}}, 0) }}""")
add("macro_default_uses_param", "{% macro m(a, b=a * 2) %}{{ a }},{{ b }}{% endmacro %}{{ m(3) }}")

# --- filters ---
add("f_trim", "[{{ s | trim }}][{{ '\n\t x \u3000' | trim }}][{{ 'xxaxx' | trim('x') }}]")
add("f_tojson", "{{ d | tojson }} {{ messages[2] | tojson }}")
add("f_tojson_indent", "{{ d | tojson(indent=2) }}\n{{ tools | tojson(indent=4) }}\n{{ [] | tojson(indent=2) }}{{ {} | tojson(indent=2) }}")
add("f_tojson_scalars", "{{ 'é \"q\" \\\\ \n\t\x01' | tojson }} {{ none | tojson }} {{ true | tojson }} {{ 1.0 | tojson }} {{ tiny | tojson }} {{ 'ünï' | tojson }}")
add("f_tojson_kwargs", "{{ d | tojson(ensure_ascii=False) }}")
add("f_length", "{{ nums | length }} {{ s | length }} {{ d | length }} {{ 'ü日' | length }} {{ nums | count }}")
add("f_join", "{{ words | join(', ') }} {{ nums | join }} {{ people | join('|', attribute='name') }}")
add("f_upper_lower", "{{ s | upper }}|{{ 'MiXeD' | lower }}|{{ messages[1].content | upper }}")
add("f_title_capitalize", "{{ 'hello wORLD-foo (bar) x_y' | title }}|{{ 'hELLO world' | capitalize }}")
add("f_default", "{{ missing | default('dflt') }} {{ nothing | default('x') }} {{ '' | default('empty', true) }} {{ missing | d('d') }} [{{ missing | default }}]")
add("f_first_last", "{{ nums | first }} {{ nums | last }} {{ 'abc' | first }} {{ 'abc' | last }} [{{ empty | first }}]")
add("f_list", "{{ 'abc' | list }} {{ d | list }} {{ nums | list }}")
add("f_map_attr", "{{ people | map(attribute='name') | join(',') }} {{ people | map(attribute='age') | list }}")
add("f_map_default", "{{ people | map(attribute='admin', default='?') | list }}")
add("f_map_filter", "{{ words | map('upper') | join(' ') }} {{ nums | map('string') | list }}")
add("f_map_nested", "{{ messages | map(attribute='role') | list }} {{ [{'a': {'b': 1}}] | map(attribute='a.b') | list }}")
add("f_select_reject", "{{ nums | select('odd') | list }} {{ nums | reject('odd') | list }} {{ [0, 1, '', 'a', none] | select | list }}")
add("f_select_args", "{{ nums | select('gt', 1) | list }} {{ nums | select('divisibleby', 2) | list }} {{ words | select('equalto', 'alpha') | list }}")
add("f_selectattr", "{{ people | selectattr('admin') | map(attribute='name') | list }} {{ people | rejectattr('admin') | map(attribute='name') | list }}")
add("f_selectattr_test", "{{ people | selectattr('age', 'gt', 30) | map(attribute='name') | list }} {{ people | selectattr('admin', 'defined') | list | length }}")
add("f_selectattr_eq", "{{ messages | selectattr('role', 'equalto', 'user') | list | length }} {{ messages | rejectattr('role', 'eq', 'user') | map(attribute='role') | join }}")
add("f_string", "{{ 1 | string }}{{ none | string }}{{ nums | string }}{{ (1 | string) + 'x' }}")
add("f_int", "{{ '42' | int }} {{ '3.7' | int }} {{ 3.7 | int }} {{ 'x' | int }} {{ 'x' | int(5) }} {{ ' -8 ' | int }} {{ true | int }} {{ '1_000' | int }}")
add("f_float", "{{ '2.5' | float }} {{ 3 | float }} {{ 'nan?' | float }} {{ 'x' | float(1.5) }} {{ ' 1e3 ' | float }}")
add("f_abs", "{{ -3 | abs }} {{ -2.5 | abs }} {{ 4 | abs }}")
add("f_round", "{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ 2.9 | round(method='floor') }} {{ 7 | round }} {{ -1.5 | round }} {{ 1234.5 | round(-2) }}")
add("f_replace", "{{ s | replace('quick', 'slow') }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 'ab' | replace('', '-') }}")
add("f_indent", "{{ text | indent }}|{{ text | indent(2, true) }}|{{ text | indent('> ', blank=true) }}|{{ text | indent(first=true, width=1) }}")
add("f_indent_trailing", "{{ 'a\nb\n' | indent(2) }}|{{ '' | indent(2, true) }}")
add("f_safe", "{{ '<b>' | safe }}")
add("f_unique", "{{ words | unique | list }} {{ words | unique(case_sensitive=true) | list }} {{ [1, 2, 1, 3, 2] | unique | list }}")
add("f_dictsort", "{{ d | dictsort }} {{ {'b': 1, 'A': 2, 'c': 0} | dictsort }} {{ {'b': 1, 'A': 2} | dictsort(true) }} {{ {'b': 1, 'a': 2} | dictsort(by='value') }} {{ {'b': 1, 'a': 2} | dictsort(reverse=true) }}")
add("f_sort", "{{ nums | sort }} {{ words | sort }} {{ words | sort(case_sensitive=true) }} {{ nums | sort(reverse=true) }} {{ people | sort(attribute='age') | map(attribute='name') | list }}")
add("f_reverse", "{{ nums | reverse | list }} {{ 'abc' | reverse }}")
add("f_sum_min_max", "{{ nums | sum }} {{ nums | min }} {{ nums | max }} {{ people | sum(attribute='age') }} {{ words | min }} {{ [1.5, 2] | sum }}")
add("f_items", "{{ d | items | list }}")
add("f_center", "[{{ 'ab' | center(7) }}][{{ 'abc' | center(6) }}]")
add("f_escape", "{{ '<a href=\"x\">&\\'</a>' | e }}")
add("f_wordcount", "{{ 'one two  three' | wordcount }}")
add("f_attr", "{{ d | attr('m') }}[{{ d | attr('items') is defined }}]")
add("f_chain", "{{ messages | map(attribute='content') | map('trim') | map('lower') | join('/') }}")
add("filter_block", "{% filter upper %}inside {{ n }}{% endfilter %}")
add("filter_block_chain", "{% filter trim | upper %}   spaced   {% endfilter %}]")

# --- tests ---
add("t_defined", "{{ n is defined }} {{ nope is defined }} {{ nope is undefined }} {{ d.nope is defined }} {{ d.z is defined }}")
add("t_none", "{{ nothing is none }} {{ n is none }} {{ nothing is not none }}")
add("t_types", "{{ s is string }} {{ n is string }} {{ d is mapping }} {{ nums is mapping }} {{ n is number }} {{ f is number }} {{ t is number }} {{ s is number }}")
add("t_iterable_sequence", "{{ nums is iterable }} {{ s is iterable }} {{ d is iterable }} {{ n is iterable }} {{ nums is sequence }} {{ d is sequence }} {{ n is sequence }} {{ nope is iterable }}")
add("t_integer_float", "{{ n is integer }} {{ f is integer }} {{ t is integer }} {{ f is float }} {{ n is float }}")
add("t_boolean", "{{ t is boolean }} {{ 1 is boolean }} {{ t is true }} {{ t is false }} {{ 1 is true }} {{ false is false }}")
add("t_equalto", "{{ n is equalto 7 }} {{ n is eq(8) }} {{ n is ne 7 }} {{ 'a' is equalto 'a' }}")
add("t_compare", "{{ n is gt 3 }} {{ n is lt 3 }} {{ n is ge 7 }} {{ n is le 6 }} {{ n is greaterthan 1 }} {{ n is lessthan 100 }}")
add("t_in", "{{ 2 is in nums }} {{ 'z' is in d }} {{ 'ick' is in s }} {{ 99 is in nums }}")
add("t_odd_even_divisible", "{{ n is odd }} {{ n is even }} {{ 9 is divisibleby 3 }} {{ 10 is divisibleby(4) }} {{ 0 is even }} {{ -3 is odd }}")
add("t_sameas", "{{ nothing is sameas none }} {{ t is sameas true }} {{ 1 is sameas true }}")
add("t_lower_upper", "{{ 'abc' is lower }} {{ 'aBc' is lower }} {{ 'ABC' is upper }} {{ '12' is upper }}")
add("t_callable", "{{ range is callable }} {{ n is callable }}")
add("t_not", "{{ n is not odd }} {{ n is not defined }} {{ not n is odd }}")
add("t_in_condition", "{% if messages[0].role is equalto 'system' and tools is not none %}sys+tools{% endif %}")

# --- string methods ---
add("m_strip", "[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ 'xxhixx'.strip('x') }}][{{ '\n\nq\n'.lstrip('\n') }}][{{ 'abcba'.rstrip('ab') }}]")
add("m_split", "{{ s.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }} {{ 'x'.split('x') }} {{ ''.split() }} {{ '  '.split(' ') }}")
add("m_split_think", "{{ '<think>\nr\n</think>\n\nanswer'.split('</think>')[-1].lstrip('\n') }}|{{ 'no think'.split('</think>')[0] }}")
add("m_startswith", "{{ s.startswith('  The') }} {{ s.endswith('fox  ') }} {{ s.startswith(('x', '  T')) }} {{ 'abc'.endswith('') }}")
add("m_upper_lower", "{{ 'aBc'.upper() }} {{ 'aBc'.lower() }} {{ 'hello world'.title() }} {{ 'they\\'re bill\\'s 2nd'.title() }} {{ 'hELLO'.capitalize() }}")
add("m_replace", "{{ 'a-b-c'.replace('-', '+') }} {{ 'a-b-c'.replace('-', '', 1) }} {{ 'xx'.replace('x', 'yy') }}")
add("m_format", "{{ '{} and {}'.format('a', 1) }} {{ '{0}{1}{0}'.format('x', 'y') }} {{ 'name={name}'.format(name='q') }} {{ '{{literal}}'.format() }}")
add("m_join", "{{ ', '.join(words) }} {{ ''.join(['a', 'b']) }}")
add("m_find_count", "{{ s.find('quick') }} {{ s.find('zzz') }} {{ 'banana'.count('a') }} {{ 'aaaa'.count('aa') }}")
add("m_dict", "{{ d.get('z') }} {{ d.get('nope') }} {{ d.get('nope', 'dflt') }} {{ d.items() | list | length }} {{ d.keys() | list }} {{ d.values() | list | length }}")
add("m_dict_get_message", "{% for m in messages %}{{ m.get('tool_calls', [])|length }}{% endfor %}")
add("m_list", "{{ nums.index(2) }} {{ [1, 1, 2].count(1) }}")
add("m_splitlines", "{{ text.splitlines() }} {{ 'a\r\nb\rc'.splitlines() }}")
add("m_isdigit", "{{ '123'.isdigit() }} {{ '12a'.isdigit() }} {{ ''.isdigit() }}")
add("methods_on_content", "{% for m in messages %}{% if m.content.startswith('Hi') %}{{ m.content.replace('Hi', 'Bye') }}{% endif %}{% endfor %}")

# --- globals and chat-template idioms ---
add("raise_unused", "{% if false %}{{ raise_exception('never') }}{% endif %}ok")
add("strftime_year", "{{ strftime_now('%Y') | length }}")
add("bos_eos", "{{ bos_token }}x{{ eos_token }}")
add("gen_prompt", "{% if add_generation_prompt %}<|assistant|>{% endif %}")
add("generation_block", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% endif %}{% endfor %}")
add("chatml", "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
add("alternation_check", "{% for m in messages[1:] %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}bad{% endif %}{% endfor %}ok")
add("tools_loop", "{% for tool in tools %}{{ tool.name }}: {{ tool.parameters | tojson }}\n{% endfor %}")
add("tool_calls", "{% for m in messages if m.tool_calls is defined %}{% for c in m.tool_calls %}{{ c.function.name }}({{ c.function.arguments | tojson }}){% endfor %}{% endfor %}")
add("tool_args_items", "{% for k, v in messages[2].tool_calls[0].function.arguments | items %}{{ k }}={{ v }};{% endfor %}")
add("system_extract", "{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] | trim %}{% set rest = messages[1:] %}{% else %}{% set sys = '' %}{% set rest = messages %}{% endif %}[{{ sys }}]{{ rest | length }}")
add("last_user_index", "{% set ns = namespace(i=-1) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.i = loop.index0 %}{% endif %}{% endfor %}{{ ns.i }}")
add("reverse_walk", "{% for m in messages[::-1] %}{{ (messages | length - 1) - loop.index0 }}{{ m.role[0] }} {% endfor %}")
add("content_is_string", "{% for m in messages %}{% if m.content is string %}s{% elif m.content is iterable %}i{% else %}n{% endif %}{% endfor %}")
add("whitespace_heavy", """{%- for message in messages %}
    {%- if message.role == 'user' %}
        {{- '<user>' + message.content }}
    {%- else %}
        {{- '<other>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<gen>' }}
{%- endif %}
""")
add("whitespace_plain_tags", """{% for message in messages %}
  {% if message.role == 'user' %}
    User: {{ message.content }}
  {% endif %}
{% endfor %}
End""")
add("whitespace_mixed", "A\n  {% for x in [1,2] -%}\n  {{ x }}\n  {%- endfor %}  \nB {{- ' C ' -}} D")
add("nested_data_print", "{{ messages[2].tool_calls }}")
add("unicode_ops", "{{ 'ünï' | upper }} {{ 'ÀB' | lower }} {{ 'é' * 2 }} {{ 'añb'.split('ñ') }} {{ 'ñ' in 'año' }}")
add("unicode_case", "{{ 'straße ÿ µ' | upper }} {{ 'ΑΒΓ Σ АБВ ЁЖ Ŀŀ Ž' | lower }} {{ 'ελλας ς привет ёж' | upper }} {{ 'ärger über' | title }} {{ 'élan VITAL'.capitalize() }}")
add("tuple_repr", "{{ (1,) }} {{ () }} {{ (1, 'a') }} {{ d.items() | list }}")
add("is_defined_chain", "{{ messages[0].tool_calls is defined }} {{ messages[2].tool_calls is defined }}")
add("loop_in_macro", "{% macro m(xs) %}{% for x in xs %}{{ loop.index }}{{ x }}{% endfor %}{% endmacro %}{{ m(words) }}")
add("set_in_loop_ns_and_plain", "{% set ns = namespace(s='') %}{% for w in words %}{% set ns.s = ns.s ~ w[0] %}{% set plain = w %}{% endfor %}{{ ns.s }}[{{ plain }}]")
add("deep_nesting", "{% for a in [1] %}{% for b in [2] %}{% for c in [3] %}{% if a %}{% if b %}{% if c %}{{ a ~ b ~ c }}{% endif %}{% endif %}{% endif %}{% endfor %}{% endfor %}{% endfor %}")
add("dict_literal_order", "{{ {'z': 1, 'a': 2, 'm': 3} | tojson }} {{ {'z': 1, 'a': 2} }}")
add("dict_dup_keys", "{{ {'a': 1, 'a': 2} }}")
add("empty_collections", "{{ [] }}{{ {} }}{{ [] | length }}{{ '' | length }}{{ [] | join(',') }}")
add("none_in_join", "{{ [1, none, 'x'] | join('-') }}")
add("truthiness", "{% for v in [0, 1, '', 'a', [], [0], {}, none, 0.0, -1] %}{{ 'T' if v else 'F' }}{% endfor %}")


# --- what real templates reach: undefined in string filters, generators, dict views, Markup ---
add("undefined_string_filters", "{{ u|trim }}|{{ u|upper }}|{{ u|lower }}|{{ u|title }}|{{ u|capitalize }}|"
    "{{ u|replace('a', 'b') }}|{{ u|center(5) }}|{{ u|wordcount }}|{{ u|string }}|{{ u|e }}|{{ people[2].admin|trim }}")
add("select_of_falsy", "{{ nothing|select|list }}{{ nothing|map('upper')|list }}{{ nothing|selectattr('x')|list }}"
    "{{ 0|reject|list }}{{ nope|rejectattr('x')|list }}{{ nope|items|list }}")
add("generator_truthy", "{% if empty|select %}T{% else %}F{% endif %}{{ empty|select is sequence }}"
    "{{ empty|select is iterable }}{{ d.items() is sequence }}")
add("generator_one_pass", "{% set g = nums|select %}{{ g|first }}{{ g|list }}{{ g|list }}")
add("generator_in", "{% set g = nums|select %}{{ 2 in g }}{{ g|list }}")
add("generator_loop", "{% set g = words|reject('equalto', 'bravo') %}{% for w in g %}{{ loop.index }}/{{ loop.length }}"
    "{{ w }} {% endfor %}{% for w in g %}again{% endfor %}")
add("reverse_iterator", "{% set g = nums|reverse %}{{ g|join }}{{ g|join }}{{ nums|select|reverse|list }}"
    "[{{ nope|last }}]{{ nope|reverse|list }}{{ d|reverse|list }}")
add("iterator_item_undefined", "[{{ (nums|select)[0] }}][{{ d.items()[0] }}]")
add("iterator_equality", "{{ nums|select == nums|select }}{{ d.items() == d.items() }}{{ d.keys() == d.keys() }}"
    "{{ d.values() == d.values() }}{{ nums|select in nums }}")
add("generator_consumers", "{{ nums|select|sum }} {{ nums|select|max }} {{ nums|select|join('-') }} "
    "{{ nums|map('string')|first }} {{ nums|unique|list }} {{ d|items|list }} {{ people|map(attribute='name')|list }}")
add("dict_views", "{{ d.items() }} {{ d.keys() }} {{ d.values() }} {{ d.items()|length }} {{ d.items()|reverse|list }} "
    "{{ d.items()|first }} {{ d.keys()|list }}")
add("markup_plus", "{{ 'a<'|safe + '<b' }} {{ '<b' + 'a<'|safe }} {{ ('a<'|safe + '<b') + '&' }} {{ 'a<'|safe ~ '<b' }} "
    "{{ (n|safe) + '<' }} {{ nums|safe|length }} {{ ('<' ~ 'a'|safe) + '<' }}")
add("markup_escape", "{{ ('<'|e) + '<' }} {{ '<'|e|e }} {{ '<\"\\''|forceescape }} {{ '<'|e is escaped }}{{ '<' is escaped }}")
add("markup_filters", "{{ ('<x>'|safe)[1:] + '<' }} {{ ('<x>'|safe)[0] + '<' }} {{ ('<x>'|safe|upper) + '<' }} "
    "{{ ('<x>'|safe|trim) + '<' }} {{ ('<x>'|safe|title) + '<' }} {{ ('<x>'|safe|replace('x', 'y')) + '<' }} "
    "{{ ('<x>'|safe * 2) + '<' }} {{ ('<x>'|safe|center(9)) + '<' }} {{ ('<x>'|safe|join) + '<' }} "
    "{{ ('<x'|safe|trim('<')) + '<' }} {{ ('<x>'|safe|string) + '<' }} {{ ('<x>'|safe|reverse) + '<' }}")
add("markup_in_set", "{% set y = '<x>'|safe %}{% set z = y + '&' %}{{ z + '\"' }}")
add("markup_tool_line", "{% for t in tools %}{{ \"Use '\"|safe + t.name + \"' to '\"|safe + t.description + "
    "\"'\\n\"|safe + t|tojson }}{% endfor %}")
add("tojson_options", "{{ {'a': 'é\x7f\u2028', 'b': '😀'}|tojson(ensure_ascii=True) }} {{ {'b': 1, 'a': {'d': 2, 'c': 3}}|tojson(sort_keys=True) }} "
    "{{ {'b': 1, 'a': 2}|tojson(indent=2, sort_keys=true) }} {{ d|tojson(separators=(',', ':')) }} "
    "{{ d|tojson(indent=1, separators=(',', ' = ')) }} {{ d|tojson(ensure_ascii=false) }}")
add("unknown_filter_in_if", "{% if false %}{{ 1|nope }}{% endif %}{{ (1|nope) if false else 2 }}"
    "{% if false %}{% for x in xs|nope %}{% endfor %}{% set x = 1|nope %}{% endif %}{{ [1|nope] if false }}")

CONSTRUCTS = C

ERRORS = [
    ("unclosed_for", "{% for x in nums %}{{ x }}"),
    ("unclosed_if", "{% if t %}yes"),
    ("unknown_tag", "{% frobnicate %}"),
    ("bad_end", "{% if t %}{% endfor %}"),
    ("unclosed_var", "{{ n "),
    ("unclosed_string", "{{ 'abc }}"),
    ("unclosed_comment", "{# never closed"),
    ("bad_paren", "{{ (1 + 2 }}"),
    ("extra_paren", "{{ 1 + 2) }}"),
    ("bad_char", "{{ n $ 2 }}"),
    ("break_outside_loop", "{% break %}"),
    ("raise_exception", "{{ raise_exception('Conversation roles must alternate') }}"),
    ("undefined_attr_of_undefined", "{{ nope.attr }}"),
    ("undefined_item_of_undefined", "{{ nope['x'] }}"),
    ("add_undefined", "{{ nope + 1 }}"),
    ("add_str_int", "{{ 'a' + 1 }}"),
    ("compare_str_int", "{{ 'a' < 1 }}"),
    ("div_zero", "{{ 1 / 0 }}"),
    ("mod_zero", "{{ 1 % 0 }}"),
    ("unknown_filter", "{{ n | frobnicate }}"),
    ("unknown_test", "{{ n is frobnicate }}"),
    ("call_non_callable", "{{ n() }}"),
    ("len_of_int", "{{ n | length }}"),
    ("iterate_int", "{% for x in n %}{% endfor %}"),
    ("unpack_mismatch", "{% for a, b in [[1, 2, 3]] %}{% endfor %}"),
    ("ns_on_dict", "{% set d.x = 1 %}"),
    ("macro_too_many_args", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"),
    ("tojson_undefined", "{{ nope | tojson }}"),
    ("range_too_big", "{{ range(1000000) | length }}"),
    ("join_of_int", "{{ ', '.join([1, 2]) }}"),
    ("split_empty_sep", "{{ 'a'.split('') }}"),
    ("trim_undefined_item", "{{ nope.x | trim }}"),
    ("list_index_error", "{{ nums.index(99) }}"),
    ("slice_step_zero", "{{ nums[::0] }}"),
    ("concat_precedence", "{{ 'a' ~ 1 + 2 }}"),
    ("test_operator_name", "{{ n is == 7 }}"),
    ("indent_undefined", "{{ nope | indent }}"),
    ("int_undefined", "{{ nope | int }}"),
    ("float_undefined", "{{ nope | float }}"),
    ("generator_length", "{{ nums | select | length }}"),
    ("generator_last", "{{ nums | select | last }}"),
    ("reverse_iterator_last", "{{ nums | reverse | last }}"),
    ("generator_slice", "{{ (nums | select)[1:] }}"),
    ("dict_view_slice", "{{ d.items()[1:] }}"),
    ("generator_tojson", "{{ tools | map(attribute='name') | tojson(indent=2) }}"),
    ("dict_view_tojson", "{{ d.items() | tojson }}"),
    ("generator_times", "{{ (nums | select) * 2 }}"),
    ("list_plus_tuple", "{{ nums + (1,) }}"),
    ("items_of_none", "{{ nothing | items | list }}"),
    ("startswith_list", "{{ 'ab'.startswith(['a']) }}"),
    ("tojson_sort_mixed_keys", "{{ {1: 1, 'a': 2} | tojson(sort_keys=true) }}"),
    ("tojson_bad_keyword", "{{ d | tojson(foo=1) }}"),
    ("unknown_filter_in_unrun_loop", "{% for x in empty %}{{ x | nope }}{% endfor %}"),
    ("unknown_filter_loop_in_if", "{% if false %}{% for x in nums %}{{ x | nope }}{% endfor %}{% endif %}"),
    ("unknown_filter_macro_in_if", "{% if false %}{% macro m() %}{{ 1 | nope }}{% endmacro %}{% endif %}"),
    ("unknown_filter_set_block", "{% set x %}{{ 1 | nope }}{% endset %}"),
    ("unknown_filter_block_in_if", "{% if false %}{% filter nope %}x{% endfilter %}{% endif %}"),
    ("unknown_test_loop_filter", "{% for x in nums if x is nope %}{% endfor %}"),
    ("unknown_filter_reached_in_if", "{% if true %}{{ 1 | nope }}{% endif %}"),
]

# Constructs jinja2 renders that we leave out: we refuse them, naming the construct (never a
# different rendering). (name, template, what our error says)
LEFT_OUT = [
    ("print_generator", "{{ nums | select }}", "printing a generator"),
    ("print_reverse_iterator", "{{ nums | reverse }}", "printing a list_reverseiterator"),
    ("concat_generator", "{{ 'x' ~ (nums | select) }}", "printing a generator"),
    ("string_of_generator", "{{ nums | select | string }}", "printing a generator"),
    ("percent_format", "{{ '%s!' % n }}", "'%' string formatting is not supported"),
    ("format_spec", "{{ '{:>5}'.format(n) }}", "format specs are not supported"),
    ("star_args", "{{ range(*[3]) | list }}", "'*args' and '**kwargs' in calls are not supported"),
    ("call_block", "{% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}x{% endcall %}", "unsupported tag 'call'"),
    ("macro_caller", "{% macro m() %}{{ caller is defined }}{% endmacro %}{{ m() }}", "'caller'"),
    ("macro_varargs", "{% macro m() %}{{ varargs }}{% endmacro %}{{ m(1) }}", "'varargs'"),
    ("macro_kwargs", "{% macro m() %}{{ kwargs }}{% endmacro %}{{ m(a=1) }}", "'kwargs'"),
    ("recursive_loop", "{% for x in [1] recursive %}{{ x }}{% endfor %}", "'recursive' loops are not supported"),
    ("block_tag", "{% block b %}x{% endblock %}", "unsupported tag 'block'"),
    ("with_tag", "{% with a = 1 %}{{ a }}{% endwith %}", "unsupported tag 'with'"),
    ("int_base", "{{ '11' | int(base=2) }}", "'base' is not supported"),
    ("rsplit_maxsplit", "{{ 'a b c'.rsplit(' ', 1) }}", "rsplit with maxsplit is not supported"),
    ("markup_method", "{{ ('<x>' | safe).upper() }}", "of a markup string"),
    ("loop_changed", "{% for x in [1, 1, 2] %}{{ loop.changed(x) }}{% endfor %}", "'changed'"),
    ("cycler", "{{ cycler('a', 'b').next() }}", "'cycler' is undefined"),
    ("joiner", "{% set j = joiner(',') %}{{ j() }}{{ j() }}", "'joiner' is undefined"),
    ("is_filter", "{{ 'upper' is filter }}", "the test 'filter' is not supported"),
] + [(f"filter_{f}", "{{ " + expr + " }}", f"the filter '{f}' is not supported") for f, expr in [
    ("groupby", "people | groupby('age') | list"), ("batch", "nums | batch(2) | list"),
    ("slice", "nums | slice(2) | list"), ("truncate", "s | truncate(9)"), ("wordwrap", "s | wordwrap(5)"),
    ("urlize", "s | urlize"), ("xmlattr", "d | xmlattr"), ("pprint", "d | pprint"), ("format", "'%s' | format(1)"),
    ("striptags", "'<b>x</b>' | striptags"), ("filesizeformat", "n | filesizeformat"), ("urlencode", "s | urlencode"),
    ("random", "nums | random")]]

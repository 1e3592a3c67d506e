#include "structured/tool_grammar.h"

#include "structured/schema_compiler.h"

namespace nanoserve::structured {

namespace {

// Appends `part`'s own nodes to `g` (the fixed nodes are shared); returns its root in `g`.
int32_t append_grammar(Grammar& g, const Grammar& part) {
  const int32_t offset = static_cast<int32_t>(g.nodes.size()) - kNumFixedNodes;
  auto remap = [offset](int32_t n) { return n == kNoNode || n < kNumFixedNodes ? n : n + offset; };
  for (size_t i = kNumFixedNodes; i < part.nodes.size(); ++i) {
    Node n = part.nodes[i];
    n.items = remap(n.items);
    n.additional = remap(n.additional);
    for (Property& p : n.props) p.node = remap(p.node);
    for (int32_t& a : n.alts) a = remap(a);
    g.nodes.push_back(std::move(n));
  }
  return remap(part.root);
}

}  // namespace

StatusOr<Grammar> tool_call_grammar(const std::vector<ToolSchema>& tools, std::string_view args_key,
                                    bool array, bool parallel) {
  if (tools.empty()) return invalid_argument("no tools to call");
  if (tools.size() > kMaxConstrainedTools)
    return invalid_argument("more than " + std::to_string(kMaxConstrainedTools) +
                            " tools cannot be decoded under their schemas at once");
  Grammar g = base_grammar();
  std::vector<int32_t> calls;
  for (const ToolSchema& t : tools) {
    nlohmann::json schema = t.parameters;
    if (schema.is_object() && !schema.contains("type") && !schema.contains("anyOf") &&
        !schema.contains("$ref") && !schema.contains("enum") && !schema.contains("const"))
      schema["type"] = "object";
    StatusOr<Grammar> part = compile_schema(schema);
    if (!part.ok()) return invalid_argument("tool '" + t.name + "': " + part.status().message());
    const int32_t args = append_grammar(g, *part);
    Node name;
    name.kind = Kind::kLiterals;
    name.literals = {nlohmann::json(t.name).dump()};
    g.nodes.push_back(std::move(name));
    const int32_t name_node = static_cast<int32_t>(g.nodes.size()) - 1;
    Node call;
    call.kind = Kind::kObject;
    call.props = {Property{"\"name\"", name_node, true},
                  Property{nlohmann::json(std::string(args_key)).dump(), args, true}};
    g.nodes.push_back(std::move(call));
    calls.push_back(static_cast<int32_t>(g.nodes.size()) - 1);
  }
  int32_t root = calls[0];
  if (calls.size() > 1) {
    Node any;
    any.kind = Kind::kAnyOf;
    any.alts = calls;
    g.nodes.push_back(std::move(any));
    root = static_cast<int32_t>(g.nodes.size()) - 1;
  }
  if (array) {
    Node list;
    list.kind = Kind::kArray;
    list.items = root;
    list.min_len = 1;
    list.max_len = parallel ? -1 : 1;
    g.nodes.push_back(std::move(list));
    root = static_cast<int32_t>(g.nodes.size()) - 1;
  }
  g.root = root;
  compute_min_depth(g);
  if (!g.fits(g.root, 0))
    return invalid_argument("the tool call cannot be finished within the nesting limit");
  return g;
}

}  // namespace nanoserve::structured

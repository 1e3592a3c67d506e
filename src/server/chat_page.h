#pragma once
// The chat page served at / (web/index.html, compiled in by CMakeLists.txt):
// one self-contained HTML file, its script and style inline, no CDN.

#include <string_view>

namespace nanoserve::server {

std::string_view chat_page_html();

}  // namespace nanoserve::server

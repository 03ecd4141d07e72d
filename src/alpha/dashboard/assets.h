// The dashboard's page: the files of src/alpha/dashboard/assets, compiled into the binary at build time
// (cmake/EmbedAssets.cmake generates the table), so the server and the reports fetch nothing from disk
// or the network.
#pragma once
#include <string_view>

namespace alpha::dashboard {

struct Asset {
  std::string_view name;          // file name, e.g. "charts.js"
  std::string_view content_type;  // e.g. "text/javascript; charset=utf-8"
  std::string_view body;
};

// The asset of that file name; nullptr when there is none.
const Asset* find_asset(std::string_view name);

}  // namespace alpha::dashboard

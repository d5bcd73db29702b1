#include "bench/status_scraper.h"

#include <httplib.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <thread>

namespace bm::bench {

Status RunStatusScraper(const std::vector<std::string>& urls, double rounds_per_second) {
  struct Target {
    std::unique_ptr<httplib::Client> client;
    std::string path;
  };
  std::vector<Target> targets;
  for (const std::string& url : urls) {
    // http://HOST:PORT/path
    const size_t path_at = url.find('/', url.find("//") + 2);
    if (url.rfind("http://", 0) != 0 || path_at == std::string::npos) {
      return InvalidArgumentError("not an http://HOST:PORT/path URL: " + url);
    }
    auto client = std::make_unique<httplib::Client>(url.substr(0, path_at));
    client->set_keep_alive(true);  // as Prometheus and browsers do
    targets.push_back(Target{std::move(client), url.substr(path_at)});
  }
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(1.0 / rounds_per_second));
  auto next = std::chrono::steady_clock::now();
  bool announced = false;
  while (true) {
    for (Target& target : targets) {
      httplib::Result result = target.client->Get(target.path);
      if (!result || result->status != 200) {
        return UnavailableError("GET " + target.path + " failed");
      }
    }
    if (!announced) {
      std::cout << "scraping" << std::endl;
      announced = true;
    }
    // Pacing the load generator: a fixed rate, not a wait for some state.
    next += period;
    std::this_thread::sleep_until(next);
  }
}

}  // namespace bm::bench

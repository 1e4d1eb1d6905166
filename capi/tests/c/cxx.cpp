// C++ under LD_PRELOAD (capi/tests/c_abi.rs): containers built before main, thread_local
// objects destroyed at thread exit, exceptions (libstdc++ allocates them with malloc), and
// threads; prints a checksum that must match the system allocator's.
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

static std::map<std::string, int> before_main = {{"a", 1}, {"b", 2}};
thread_local std::vector<int> tls_vec(1000, 7);

int main() {
    std::vector<std::thread> ts;
    std::vector<long> sums(4);
    for (int t = 0; t < 4; t++)
        ts.emplace_back([t, &sums] {
            std::map<int, std::string> m;
            for (int i = 0; i < 20000; i++)
                m[i * 7 % 5000] = std::to_string(i) + std::string(i % 100, 'x');
            long s = 0;
            for (auto &kv : m) s += kv.second.size();
            try {
                throw std::runtime_error(std::string(500 + t, 'e'));
            } catch (const std::exception &e) {
                s += std::string(e.what()).size();
            }
            sums[t] = s + tls_vec.size();
        });
    for (auto &t : ts) t.join();
    long total = 0;
    for (long s : sums) total += s;
    auto big = std::make_unique<char[]>(1 << 22);
    big[(1 << 22) - 1] = 1;
    std::cout << before_main.size() << " " << total << " " << int(big[(1 << 22) - 1]) << std::endl;
}

// templates: a C++ test program of two parts whose hot functions are
// members of class templates, so that their demangled names are as long as
// real C++ code's (namespaces, template arguments, argument lists).
//
//   templates [--scale S]
//
// Part one folds a vector of pairs through a map of vectors
// (Accumulator<...>::fold); part two mixes a vector of strings
// (Mixer<...>::mix).  --scale multiplies the work (default 1.0, about a
// second each on a current core).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace workload {
namespace detail {

template <typename Key, typename Value, typename Compare = std::less<Key>>
struct Accumulator {
    __attribute__((noinline)) Value fold(
        const std::vector<std::pair<Key, Value>> &items,
        std::map<std::string, std::vector<Key>, std::less<std::string>> &index,
        unsigned long rounds) {
        Value total = 0;
        for (unsigned long r = 0; r < rounds; ++r)
            for (const auto &item : items)
                total = total * 0.999999 + static_cast<Value>(item.first % 7) + item.second;
        index["total"].push_back(static_cast<Key>(total));
        return total;
    }
};

template <typename Text, typename Hash = std::hash<Text>>
struct Mixer {
    __attribute__((noinline)) std::uint64_t mix(
        const std::vector<Text, std::allocator<Text>> &words,
        const std::map<Text, std::pair<std::uint64_t, std::uint64_t>> &seeds,
        unsigned long rounds) {
        std::uint64_t h = seeds.size();
        for (unsigned long r = 0; r < rounds; ++r)
            for (const auto &word : words)
                for (char c : word)
                    h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
        return h;
    }
};

}  // namespace detail
}  // namespace workload

static volatile double sink_d;
static volatile std::uint64_t sink_u;

int main(int argc, char **argv) {
    double scale = 1.0;
    if (argc == 3 && std::strcmp(argv[1], "--scale") == 0)
        scale = std::atof(argv[2]);
    std::vector<std::pair<unsigned long, double>> items;
    for (unsigned long i = 0; i < 1000; ++i)
        items.emplace_back(i * 2654435761ul, 1.0 / (i + 1));
    std::map<std::string, std::vector<unsigned long>> index;
    workload::detail::Accumulator<unsigned long, double> accumulator;
    sink_d = accumulator.fold(items, index, static_cast<unsigned long>(300000 * scale));

    std::vector<std::string> words;
    for (int i = 0; i < 100; ++i)
        words.push_back("word-" + std::to_string(i * 7919));
    std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> seeds{{"a", {1, 2}}};
    workload::detail::Mixer<std::string> mixer;
    sink_u = mixer.mix(words, seeds, static_cast<unsigned long>(400000 * scale));
    return 0;
}

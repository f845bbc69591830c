// `kiln cache`: look into the artifact cache and look after it.
#include <algorithm>
#include <cstdio>
#include <map>
#include <iostream>

#include "builders/explain.h"
#include "cache/bundle.h"
#include "cache/cache_key.h"
#include "cache/store.h"
#include "support/units.h"
#include "tools/cli_common.h"

namespace kiln::tools {

const char* const k_cache_help = R"(usage: kiln cache <command> [options]

commands:
  stats                     counters (hits per tier, misses, compiles, compile time spent and
                            saved as wall and as CPU time, evictions, repairs, adopted blobs),
                            what the cache keeps against its cap, and for each remote tier its
                            hits, misses, errors, rejected objects, bytes, time
  ls [--op NAME] [--target T]
                            the stored artifacts (and cached compile errors)
  show KEY                  one entry by key or unique key prefix, with its compiler log
  gc [--max-size SIZE]      remove what writers that died left and what fails its checks, adopt
                            valid blobs the index lacks, then evict least recently used entries
                            until everything the cache keeps fits in SIZE (default: the cap,
                            the max_size setting or 5G)
  verify [--repair]         read and check every entry and the files a group hands out (Triton's);
                            damaged ones are removed; blobs the index lacks are reported, and
                            with --repair adopted (exit 1 if anything was wrong)
  clear                     remove every entry
  explain SPEC [--target T] why is this op not a hit? names what differs from the nearest entry
  pack FILE [--op NAME]... [--target T]...
                            write the artifacts (all, or those of the ops and targets named) and
                            their header manifests into one portable file, signed when a
                            cluster secret is configured (remote.secret_file)
  unpack FILE               check a bundle whole (every object's hashes, and its signature when
                            a secret is configured), then import it; a damaged bundle is refused
                            naming the object that failed, and nothing is imported

Every command takes --json. Sizes take units: 512M, 5G.
)";

namespace {

Result<std::unique_ptr<cache::Store>> open_store(const GlobalOptions& global) {
  KILN_ASSIGN_OR_RETURN(cache::Settings settings, global.settings());
  cache::StoreOptions options;
  KILN_ASSIGN_OR_RETURN(options.max_bytes, settings.max_bytes());
  options.report_damage = [](const std::string& message) { std::cerr << "kiln: warning: " << message << "\n"; };
  options.report_notice = [](const std::string& message) { std::cerr << "kiln: warning: " << message << "\n"; };
  // `kiln cache` acts on the folder named: one refused for whose it is fails here, rather than
  // clearing, collecting or filling a private store in its place.
  options.private_fallback = false;
  auto store = cache::Store::open(settings.cache_dir(), options);
  if (!store.ok())
    return Status(store.status().code(), "cannot open the kiln cache " + settings.cache_dir() + ": " + store.status().message() +
                                             " (set KILN_CACHE_DIR or --cache-dir to a folder this user can write)");
  return store;
}

std::string record_json(const cache::ArtifactRecord& r, bool full) {
  std::string out = "{\"key\":\"" + r.key.hex() + "\",\"op\":" + json_string(r.op) + ",\"target\":" + json_string(r.target) +
                    ",\"kind\":" + json_string(r.kind) + ",\"size\":" + std::to_string(r.size) +
                    ",\"stored_size\":" + std::to_string(r.stored_size) + ",\"hits\":" + std::to_string(r.hits) +
                    ",\"created\":" + std::to_string(r.created) + ",\"last_used\":" + std::to_string(r.last_used) +
                    ",\"compile_ms\":" + fixed(r.compile_ms, 3);
  if (full) {
    out += ",\"toolchain\":" + json_string(r.toolchain) + ",\"input_key\":\"" + r.input_key.hex() +
           "\",\"entry_points\":" + json_string(r.entry_points) + ",\"log\":" + json_string(r.log) + ",\"components\":{";
    bool first = true;
    for (auto& [f, v] : cache::decode_components(r.components)) {
      out += (first ? "" : ",") + json_string(f) + ":" + json_string(v);
      first = false;
    }
    out += "}";
  }
  return out + "}";
}

// The remote tiers' counters ("remote|<tier>|<counter>") by tier, in the order first seen.
std::vector<std::pair<std::string, std::map<std::string, int64_t>>> tier_counters(const std::map<std::string, int64_t>& counters) {
  std::vector<std::pair<std::string, std::map<std::string, int64_t>>> out;
  for (auto& [name, value] : counters) {
    if (name.rfind("remote|", 0) != 0) continue;
    size_t bar = name.rfind('|');
    std::string tier = name.substr(7, bar - 7), counter = name.substr(bar + 1);
    auto it = std::find_if(out.begin(), out.end(), [&](auto& p) { return p.first == tier; });
    if (it == out.end()) it = out.insert(out.end(), {tier, {}});
    it->second[counter] = value;
  }
  return out;
}

// Compiles whose result is not in the cache, by reason ("<who>|not_cached|<reason>", blanks as
// '_'): kiln cc's commands ("cc") and libkiln_nvrtc.so's compiles ("nvrtc").
std::map<std::string, int64_t> not_cached_counters(const std::map<std::string, int64_t>& counters, std::string_view who) {
  std::map<std::string, int64_t> out;
  const std::string prefix = std::string(who) + "|not_cached|";
  for (auto& [name, value] : counters)
    if (name.rfind(prefix, 0) == 0 && value) out[name.substr(prefix.size())] = value;
  return out;
}

int stats(const ParsedArgs& args, cache::Store& store) {
  auto s = store.statistics();
  if (!s.ok()) return fail(s.status());
  auto c = s->counters;
  int64_t hits = c["hits_memory"] + c["hits_disk"] + c["hits_remote"];
  auto tiers = tier_counters(c);
  const std::pair<const char*, std::map<std::string, int64_t>> not_cached[] = {{"cc", not_cached_counters(c, "cc")},
                                                                              {"nvrtc", not_cached_counters(c, "nvrtc")}};
  if (args.has("--json")) {
    std::cout << "{\"hits\":" << hits << ",\"misses\":" << c["misses"] << ",\"compiles\":" << c["compiles"]
              << ",\"evictions\":" << c["evictions"] << ",\"repairs\":" << c["repairs"] << ",\"adopted\":" << c["adopted"]
              << ",\"bytes\":" << s->bytes << ",\"blob_bytes\":" << s->blob_bytes << ",\"other_bytes\":" << s->other_bytes
              << ",\"hits_memory\":" << c["hits_memory"] << ",\"hits_disk\":" << c["hits_disk"] << ",\"hits_remote\":" << c["hits_remote"]
              << ",\"compile_wall_ms_spent\":" << fixed(c["compile_wall_us_spent"] / 1000.0, 3)
              << ",\"compile_cpu_ms_spent\":" << fixed(c["compile_cpu_us_spent"] / 1000.0, 3)
              << ",\"compile_wall_ms_saved\":" << fixed(c["compile_wall_us_saved"] / 1000.0, 3)
              << ",\"compile_cpu_ms_saved\":" << fixed(c["compile_cpu_us_saved"] / 1000.0, 3) << ",\"artifacts\":" << s->artifacts
              << ",\"raw_bytes\":" << s->raw_bytes << ",\"max_bytes\":" << s->max_bytes << ",\"root\":" << json_string(store.root())
              << ",\"remote_tiers\":[";
    for (size_t i = 0; i < tiers.size(); ++i) {
      std::cout << (i ? "," : "") << "{\"tier\":" << json_string(tiers[i].first);
      for (auto& [name, value] : tiers[i].second) std::cout << "," << json_string(name) << ":" << value;
      std::cout << "}";
    }
    std::cout << "]";
    for (auto& [who, reasons] : not_cached) {
      std::cout << ",\"" << who << "_not_cached\":{";
      bool first = true;
      for (auto& [reason, n] : reasons) {
        std::cout << (first ? "" : ",") << json_string(reason) << ":" << n;
        first = false;
      }
      std::cout << "}";
    }
    std::cout << "}\n";
    return 0;
  }
  double ratio = s->blob_bytes ? static_cast<double>(s->raw_bytes) / static_cast<double>(s->blob_bytes) : 0;
  std::cout << "cache folder        " << store.root() << "\n"
            << "artifacts           " << s->artifacts << "\n"
            << "size                " << human_size(s->bytes + s->other_bytes) << " of " << human_size(s->max_bytes) << ": artifacts "
            << human_size(s->bytes) << " (blobs " << human_size(s->blob_bytes) << ", " << fixed(ratio, 2)
            << "x compressed; copies handed out and manifests " << human_size(s->bytes - s->blob_bytes) << "), index, journals and staging "
            << human_size(s->other_bytes) << "\n"
            << "hits                " << hits << " (memory " << c["hits_memory"] << ", disk " << c["hits_disk"] << ", remote "
            << c["hits_remote"] << ")\n"
            << "misses              " << c["misses"] << "\n"
            << "compiles            " << c["compiles"] << "\n"
            << "compile time spent  " << fixed(c["compile_wall_us_spent"] / 1e6, 2) << " s wall, " << fixed(c["compile_cpu_us_spent"] / 1e6, 2)
            << " s CPU\n"
            << "compile time saved  " << fixed(c["compile_wall_us_saved"] / 1e6, 2) << " s wall, " << fixed(c["compile_cpu_us_saved"] / 1e6, 2)
            << " s CPU\n"
            << "evictions           " << c["evictions"] << "\n"
            << "repairs             " << c["repairs"] << "\n"
            << "adopted             " << c["adopted"] << " (blobs the index lacked, indexed again)\n";
  for (auto& [who, counted] : not_cached) {
    if (counted.empty()) continue;
    int64_t total = 0;
    std::string reasons;
    for (auto& [reason, n] : counted) {
      total += n;
      reasons += (reasons.empty() ? "" : ", ") + reason + " " + std::to_string(n);
    }
    std::cout << (std::string_view(who) == "cc" ? "kiln cc" : "kiln nvrtc") << ", not cached " << total << " (" << reasons << ")\n";
  }
  for (auto& [tier, t] : tiers) {
    auto get = [&](const char* n) { auto it = t.find(n); return it == t.end() ? int64_t{0} : it->second; };
    std::cout << "remote " << tier << "\n"
              << "  hits " << get("hits") << ", misses " << get("misses") << ", errors " << get("errors") << ", rejected "
              << get("rejected") << ", skipped " << get("skipped") << "\n"
              << "  received " << human_size(static_cast<uint64_t>(get("bytes_in"))) << ", published " << get("published") << " ("
              << human_size(static_cast<uint64_t>(get("bytes_out"))) << "), time " << fixed(get("us") / 1e6, 2) << " s\n";
  }
  return 0;
}

int ls(const ParsedArgs& args, cache::Store& store) {
  auto all = store.list(args.value("--op"), args.value("--target"));
  if (!all.ok()) return fail(all.status());
  if (args.has("--json")) {
    std::cout << "[";
    for (size_t i = 0; i < all->size(); ++i) std::cout << (i ? ",\n " : "") << record_json((*all)[i], false);
    std::cout << "]\n";
    return 0;
  }
  std::printf("%-12s  %-16s %-16s %-13s %10s %6s  %-12s %10s\n", "key", "op", "target", "kind", "size", "hits", "last used",
              "compile ms");
  for (auto& r : *all)
    std::printf("%-12s  %-16s %-16s %-13s %10s %6llu  %-12s %10s\n", r.key.hex().substr(0, 12).c_str(), r.op.c_str(),
                r.target.c_str(), r.kind.c_str(), human_size(r.stored_size).c_str(), static_cast<unsigned long long>(r.hits),
                age(r.last_used).c_str(), fixed(r.compile_ms).c_str());
  return 0;
}

int show(const ParsedArgs& args, cache::Store& store) {
  if (args.positional.size() != 2) return usage_error("cache show takes one key", k_cache_help);
  auto found = store.find(args.positional[1]);
  if (!found.ok()) return fail(found.status());
  if (!found->has_value()) return fail(not_found("no entry with key " + args.positional[1]));
  const auto& r = **found;
  if (args.has("--json")) {
    std::cout << record_json(r, true) << "\n";
    return 0;
  }
  std::cout << "key          " << r.key.hex() << "\nop           " << r.op << "\ntarget       " << r.target << "\nkind         "
            << r.kind << "\nsize         " << human_size(r.size) << " (" << human_size(r.stored_size) << " stored)\n"
            << "hits         " << r.hits << "\ncreated      " << age(r.created) << "\nlast used    " << age(r.last_used)
            << "\ncompile      " << fixed(r.compile_ms) << " ms\ntoolchain    " << r.toolchain << "\nentry points "
            << r.entry_points << "\ninput key    " << r.input_key.hex() << "\nmade of:\n";
  for (auto& [f, v] : cache::decode_components(r.components)) std::cout << "  " << f << " = " << v << "\n";
  if (!r.log.empty()) std::cout << "compiler log:\n" << r.log;
  return 0;
}

int gc(const ParsedArgs& args, cache::Store& store) {
  uint64_t target = store.max_bytes();
  if (auto v = args.value("--max-size"); !v.empty()) {
    auto parsed = parse_size(v);
    if (!parsed.ok()) return usage_error(parsed.status().message(), k_cache_help);
    target = parsed.value();
  }
  auto r = store.gc(target);
  if (!r.ok()) return fail(r.status());
  if (args.has("--json")) {
    std::cout << "{\"evicted\":" << r->evicted << ",\"bytes_freed\":" << r->bytes_freed << ",\"bytes\":" << r->bytes_after
              << ",\"other_bytes\":" << r->other_bytes << ",\"temporaries_removed\":" << r->temporaries_removed
              << ",\"orphans_removed\":" << r->orphans_removed << ",\"adopted\":" << r->adopted << "}\n";
  } else {
    std::cout << "evicted " << r->evicted << " entries (" << human_size(r->bytes_freed) << "); the cache holds "
              << human_size(r->bytes_after + r->other_bytes) << " of " << human_size(target) << " (artifacts " << human_size(r->bytes_after)
              << ", index, journals and staging " << human_size(r->other_bytes) << "); removed " << r->temporaries_removed
              << " stale temporaries and " << r->orphans_removed << " damaged blobs or copies of artifacts gone; adopted " << r->adopted
              << " valid blobs the index lacked\n";
  }
  return 0;
}

int verify(const ParsedArgs& args, cache::Store& store) {
  auto r = store.verify(args.has("--repair"));
  if (!r.ok()) return fail(r.status());
  if (args.has("--json")) {
    std::cout << "{\"checked\":" << r->checked << ",\"ok\":" << r->ok << ",\"damaged\":" << r->damaged
              << ",\"missing\":" << r->missing << ",\"unindexed\":" << r->unindexed << ",\"adopted\":" << r->adopted
              << ",\"problems\":[";
    for (size_t i = 0; i < r->problems.size(); ++i) std::cout << (i ? "," : "") << json_string(r->problems[i]);
    std::cout << "],\"files_differing\":[";
    for (size_t i = 0; i < r->files_differing.size(); ++i) std::cout << (i ? "," : "") << json_string(r->files_differing[i]);
    std::cout << "]}\n";
  } else {
    for (auto& p : r->problems)
      std::cerr << "kiln: " << (p.find("not in the index") != std::string::npos ? p : "damaged: " + p + " (removed; it will be compiled again)")
                << "\n";
    for (auto& p : r->files_differing)
      std::cerr << "kiln: damaged: the files handed out for " << p << " differ from it (removed; they are put back from it on their next use)\n";
    std::cout << "checked " << r->checked << ": " << r->ok << " ok, " << r->damaged << " damaged, " << r->missing
              << " missing; " << r->unindexed << " blobs not in the index" << (args.has("--repair") ? ", " + std::to_string(r->adopted) + " adopted" : "");
    if (!r->files_differing.empty()) std::cout << "; the files of " << r->files_differing.size() << " of the ok ones differed";
    std::cout << "\n";
  }
  return r->damaged + r->missing + r->unindexed + r->files_differing.size() == 0 ? 0 : 1;
}

int clear(const ParsedArgs& args, cache::Store& store) {
  auto before = store.statistics();
  Status st = store.clear();
  if (!st.ok()) return fail(st);
  uint64_t n = before.ok() ? before->artifacts : 0;
  if (args.has("--json")) std::cout << "{\"removed\":" << n << "}\n";
  else std::cout << "removed " << n << " entries from " << store.root() << "\n";
  return 0;
}

int explain(const ParsedArgs& args, const GlobalOptions& global) {
  if (args.positional.size() != 2) return usage_error("cache explain takes one spec file or op name", k_cache_help);
  auto ops = make_ops(args, global);
  if (!ops.ok()) return fail(ops.status());
  std::string what = args.positional[1];
  auto spec = what.find('/') != std::string::npos || (what.size() > 5 && what.compare(what.size() - 5, 5, ".toml") == 0)
                  ? builders::parse_spec_file(what)
                  : (*ops)->find_spec(what);
  if (!spec.ok()) return fail(spec.status());
  auto target = builders::parse_target(args.value("--target", (*ops)->accelerator().native_target()));
  if (!target.ok()) return fail(target.status());
  auto e = builders::explain_miss(**ops, *spec, *target);
  if (!e.ok()) return fail(e.status());
  if (args.has("--json")) {
    std::cout << "{\"op\":" << json_string(e->op) << ",\"target\":" << json_string(e->target)
              << ",\"cached\":" << (e->cached ? "true" : "false") << ",\"key\":" << (e->key ? "\"" + e->key->hex() + "\"" : "null")
              << ",\"stored_entries\":" << e->stored_entries << ",\"nearest\":";
    if (e->nearest) {
      std::cout << "{\"key\":\"" << e->nearest->key.hex() << "\",\"kind\":" << json_string(e->nearest->kind)
                << ",\"created\":" << e->nearest->created << ",\"differences\":[";
      for (size_t i = 0; i < e->nearest->differences.size(); ++i)
        std::cout << (i ? "," : "") << json_string(e->nearest->differences[i]);
      std::cout << "]}";
    } else {
      std::cout << "null";
    }
    std::cout << "}\n";
    return 0;
  }
  if (e->cached) {
    std::cout << e->op << " for " << e->target << " is cached: " << e->key->hex() << "\n";
    return 0;
  }
  std::cout << e->op << " for " << e->target << " is a miss";
  if (!e->nearest) {
    std::cout << ": nothing is stored for this op and target yet\n";
    return 0;
  }
  std::cout << ". The nearest of " << e->stored_entries << " stored entries is " << e->nearest->key.hex() << " ("
            << e->nearest->kind << ", " << age(e->nearest->created) << "); it differs in:\n";
  for (auto& d : e->nearest->differences) std::cout << "  " << d << "\n";
  return 0;
}

// Who signs and whose signatures load (publisher keys, else the cluster secret); an error when
// a key or secret is configured but unusable.
Result<cache::TrustConfig> configured_secret(const GlobalOptions& global) {
  KILN_ASSIGN_OR_RETURN(cache::Settings settings, global.settings());
  return cache::trust_from_settings(settings);
}

int pack(const ParsedArgs& args, cache::Store& store, const GlobalOptions& global) {
  if (args.positional.size() != 2) return usage_error("cache pack takes one file", k_cache_help);
  auto secret = configured_secret(global);
  if (!secret.ok()) return fail(secret.status());
  cache::PackFilter filter{args.all("--op"), args.all("--target")};
  auto r = cache::pack_bundle(store, args.positional[1], filter, *secret);
  if (!r.ok()) return fail(r.status());
  if (args.has("--json")) {
    std::cout << "{\"file\":" << json_string(args.positional[1]) << ",\"artifacts\":" << r->artifacts << ",\"manifests\":" << r->manifests
              << ",\"bytes\":" << r->bytes << ",\"signed\":" << (r->signed_objects ? "true" : "false") << "}\n";
  } else {
    std::cout << "packed " << r->artifacts << " artifacts and " << r->manifests << " manifests into " << args.positional[1] << " ("
              << human_size(r->bytes) << (r->signed_objects ? ", signed" : ", unsigned") << ")\n";
  }
  if (!r->artifacts) std::cerr << "kiln: warning: nothing in the cache matched: the bundle is empty\n";
  return 0;
}

int unpack(const ParsedArgs& args, cache::Store& store, const GlobalOptions& global) {
  if (args.positional.size() != 2) return usage_error("cache unpack takes one file", k_cache_help);
  auto secret = configured_secret(global);
  if (!secret.ok()) return fail(secret.status());
  auto r = cache::unpack_bundle(store, args.positional[1], *secret);
  if (!r.ok()) return fail(r.status());
  if (args.has("--json")) {
    std::cout << "{\"file\":" << json_string(args.positional[1]) << ",\"artifacts\":" << r->artifacts << ",\"already_here\":"
              << r->already_here << ",\"manifests\":" << r->manifests << ",\"bytes\":" << r->bytes
              << ",\"signed\":" << (r->signed_objects ? "true" : "false") << "}\n";
  } else {
    std::cout << "imported " << r->artifacts << " artifacts (" << human_size(r->bytes) << ") and " << r->manifests << " manifests from "
              << args.positional[1] << (r->already_here ? "; " + std::to_string(r->already_here) + " were already here" : "")
              << (r->signed_objects ? " (every signature checked)" : "") << "\n";
  }
  return 0;
}

}  // namespace

int cmd_cache(const std::vector<std::string>& argv, const GlobalOptions& global) {
  auto args = parse_args(argv, {"--op", "--target", "--max-size", "--spec-dir"}, {"--json", "--repair", "--help", "-h"});
  if (!args.ok()) return usage_error(args.status().message(), k_cache_help);
  if (args->has("--help") || args->has("-h") || args->positional.empty()) {
    std::cout << k_cache_help;
    return args->positional.empty() && !args->has("--help") && !args->has("-h") ? 2 : 0;
  }
  const std::string& sub = args->positional[0];
  if (sub == "explain") return explain(*args, global);
  if (sub != "stats" && sub != "ls" && sub != "show" && sub != "gc" && sub != "verify" && sub != "clear" && sub != "pack" &&
      sub != "unpack")
    return usage_error("unknown cache command '" + sub + "'", k_cache_help);
  if (sub != "show" && sub != "pack" && sub != "unpack" && args->positional.size() != 1)
    return usage_error("cache " + sub + " takes no arguments", k_cache_help);
  auto store = open_store(global);
  if (!store.ok()) return fail(store.status());
  if (sub == "stats") return stats(*args, **store);
  if (sub == "ls") return ls(*args, **store);
  if (sub == "show") return show(*args, **store);
  if (sub == "gc") return gc(*args, **store);
  if (sub == "verify") return verify(*args, **store);
  if (sub == "pack") return pack(*args, **store, global);
  if (sub == "unpack") return unpack(*args, **store, global);
  return clear(*args, **store);
}

}  // namespace kiln::tools

// lynx_frontier: the trade-off between unique experts and retained router mass, per policy and
// batch size, on a router trace (SPEC §6). Sweeps each policy's parameters, prints a table,
// writes a CSV and an SVG with one frontier curve per policy and one panel per batch size.
// Host path only (a sweep is many small routings; the device gives the same ids).

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <stdexcept>
#include <sstream>
#include <string>
#include <vector>

#include <lynx/host.hpp>

#include "common/evaluate.hpp"
#include "common/model_flags.hpp"
#include "common/trace.hpp"

using namespace lynx_examples;

namespace {

const char* usage =
    "usage: lynx_frontier [--trace DIR] [--top-k K] [--batch-sizes 8,16,32,64] [--csv FILE] [--svg FILE]\n"
    "                     [--model NAME] [--groups G --top-groups TG] [--scaling S]\n"
    "                     [--bias FILE] [--relaxed-groups]\n"
    "Without --trace it runs on the built-in generator (with --model: at the model's N and k, and\n"
    "with a correction bias where the model has one). The router flags are lynx_replay's.\n";

struct point {
  int batch_size;
  std::string family, setting;
  summary s;
};

std::vector<lynx::route_params> sweep(const lynx::route_params& defaults, std::vector<std::string>& family,
                                      std::vector<std::string>& setting) {
  lynx::route_params base = defaults;  // each family sets only its own knobs
  base.anchor_top1 = false;
  base.budget_experts = 0;
  base.budget_fraction = base.budget_mass = 0.0f;
  std::vector<lynx::route_params> out;
  const auto push = [&](lynx::route_params p, const std::string& f) {
    out.push_back(p);
    family.push_back(f);
    setting.push_back(describe(p));
  };
  // With a correction bias the bins are in units of choice score, not nats (docs/ROUTERS.md).
  const std::vector<float> alphas = base.router.bias ? std::vector<float>{5.0f, 10.0f, 20.0f, 40.0f}
                                                     : std::vector<float>{0.5f, 1.0f, 2.0f, 3.0f};
  for (const bool anchor : {false, true})
    for (const float alpha : alphas)
      for (const int beta : {1, 2, 3, 4}) {
        lynx::route_params p = base;
        p.kind = lynx::policy::lynx;
        p.alpha = alpha;
        p.beta = beta;
        p.anchor_top1 = anchor;
        push(p, anchor ? "lynx+anchor" : "lynx");
      }
  for (int keep = 1; keep < base.top_k; ++keep) {
    lynx::route_params p = base;
    p.kind = lynx::policy::piggyback;
    p.keep_k = keep;
    push(p, "piggyback");
  }
  for (const float f : {0.5f, 0.55f, 0.6f, 0.65f, 0.7f, 0.75f, 0.8f, 0.85f, 0.9f}) {
    lynx::route_params p = base;
    p.kind = lynx::policy::budget;
    p.budget_fraction = f;
    push(p, "budget-fraction");
  }
  for (const float m : {0.9f, 0.92f, 0.93f, 0.94f, 0.95f, 0.96f, 0.97f, 0.98f, 0.99f}) {
    lynx::route_params p = base;
    p.kind = lynx::policy::budget;
    p.budget_mass = m;
    push(p, "budget-mass");
  }
  push(defaults, "default");
  return out;
}

// Unique experts a family's front needs to retain `r` of the mass (linear between its points;
// negative when the front never reaches r below plain top-k).
double unique_at(const std::vector<const point*>& f, double r) {
  for (std::size_t i = 0; i < f.size(); ++i) {
    const double ri = f[i]->s.mean(f[i]->s.retained), ui = f[i]->s.mean(f[i]->s.unique_after);
    if (ri < r) continue;
    if (i == 0) return ui;
    const double r0 = f[i - 1]->s.mean(f[i - 1]->s.retained), u0 = f[i - 1]->s.mean(f[i - 1]->s.unique_after);
    return u0 + (ui - u0) * (r - r0) / (ri - r0);
  }
  return -1;
}

// The Pareto front of one family: fewer unique experts and more retained mass are better.
std::vector<const point*> front(const std::vector<point>& pts, int bs, const std::string& family) {
  std::vector<const point*> mine;
  for (const point& p : pts)
    if (p.batch_size == bs && p.family == family) mine.push_back(&p);
  std::sort(mine.begin(), mine.end(), [](const point* a, const point* b) {
    return a->s.mean(a->s.unique_after) < b->s.mean(b->s.unique_after);
  });
  std::vector<const point*> f;
  double best = -1;
  for (const point* p : mine)
    if (p->s.mean(p->s.retained) > best) {
      best = p->s.mean(p->s.retained);
      f.push_back(p);
    }
  return f;
}

void write_svg(const std::string& path, const std::vector<point>& pts, const std::vector<int>& sizes,
               const std::vector<std::string>& families, const std::string& title) {
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#000000"};
  const int pw = 420, ph = 320, margin = 55, cols = 2;
  const int rows = static_cast<int>((sizes.size() + cols - 1) / cols);
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << cols * pw << "' height='" << rows * ph + 70
      << "' font-family='sans-serif' font-size='11'>\n<rect width='100%' height='100%' fill='white'/>\n"
      << "<text x='10' y='18' font-size='14'>" << title << "</text>\n";
  for (std::size_t i = 0; i + 1 < families.size(); ++i)
    svg << "<rect x='" << 10 + 135 * i << "' y='28' width='12' height='12' fill='" << colors[i % 7] << "'/><text x='"
        << 26 + 135 * i << "' y='38'>" << families[i] << "</text>\n";
  const std::size_t last = families.size() - 1;  // the library default: a black ring
  svg << "<circle cx='" << 16 + 135 * last << "' cy='34' r='5' fill='none' stroke='black' stroke-width='2'/><text x='"
      << 26 + 135 * last << "' y='38'>" << families.back() << "</text>\n";
  for (std::size_t b = 0; b < sizes.size(); ++b) {
    const int ox = static_cast<int>(b % cols) * pw, oy = 50 + static_cast<int>(b / cols) * ph;
    double umin = 1e9, umax = 0, rmin = 1;
    for (const point& p : pts)
      if (p.batch_size == sizes[b]) {
        umin = std::min(umin, p.s.mean(p.s.unique_after));
        umax = std::max(umax, p.s.mean(p.s.unique_before));
        rmin = std::min(rmin, p.s.mean(p.s.retained));
      }
    rmin = std::max(0.0, std::floor(rmin * 50) / 50);
    umin = std::floor(umin) - 1;
    umax = std::ceil(umax) + 1;
    const double x0 = ox + margin, x1 = ox + pw - 15, y0 = oy + ph - margin + 10, y1 = oy + 20;
    const auto X = [&](double u) { return x0 + (u - umin) / (umax - umin) * (x1 - x0); };
    const auto Y = [&](double r) { return y0 - (r - rmin) / (1.0 - rmin) * (y0 - y1); };
    svg << "<rect x='" << x0 << "' y='" << y1 << "' width='" << x1 - x0 << "' height='" << y0 - y1
        << "' fill='none' stroke='#999'/>\n<text x='" << x0 << "' y='" << y1 - 5 << "' font-size='12'>batch size "
        << sizes[b] << "</text>\n";
    for (int g = 0; g <= 4; ++g) {
      const double u = umin + (umax - umin) * g / 4, r = rmin + (1 - rmin) * g / 4;
      svg << "<text x='" << X(u) - 8 << "' y='" << y0 + 14 << "'>" << static_cast<int>(u + 0.5) << "</text>"
          << "<text x='" << x0 - 38 << "' y='" << Y(r) + 4 << "'>" << std::to_string(r).substr(0, 5) << "</text>\n";
    }
    svg << "<text x='" << (x0 + x1) / 2 - 60 << "' y='" << y0 + 30 << "'>unique experts per batch</text>"
        << "<text x='" << ox + 12 << "' y='" << (y0 + y1) / 2 + 40 << "' transform='rotate(-90 " << ox + 12 << ' '
        << (y0 + y1) / 2 + 40 << ")'>retained router mass</text>\n";
    for (const point& p : pts)
      if (p.batch_size == sizes[b] && p.family == families.back()) {  // plain top-k and the default
        svg << "<circle cx='" << X(p.s.mean(p.s.unique_after)) << "' cy='" << Y(p.s.mean(p.s.retained))
            << "' r='5' fill='none' stroke='black' stroke-width='2'/>\n";
        svg << "<circle cx='" << X(p.s.mean(p.s.unique_before)) << "' cy='" << Y(1.0) << "' r='4' fill='black'/><text x='"
            << X(p.s.mean(p.s.unique_before)) - 62 << "' y='" << Y(1.0) + 16 << "'>plain top-k</text>\n";
      }
    for (std::size_t f = 0; f + 1 < families.size(); ++f) {
      const auto fr = front(pts, sizes[b], families[f]);
      if (fr.empty()) continue;
      svg << "<polyline fill='none' stroke-width='1.8' stroke='" << colors[f % 7] << "' points='";
      for (const point* p : fr) svg << X(p->s.mean(p->s.unique_after)) << ',' << Y(p->s.mean(p->s.retained)) << ' ';
      svg << "'/>\n";
      for (const point* p : fr)
        svg << "<circle cx='" << X(p->s.mean(p->s.unique_after)) << "' cy='" << Y(p->s.mean(p->s.retained))
            << "' r='2.5' fill='" << colors[f % 7] << "'/>\n";
    }
  }
  svg << "</svg>\n";
  std::ofstream(path) << svg.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::string trace_dir, csv_path = "frontier.csv", svg_path = "frontier.svg";
  std::vector<int> sizes = {8, 16, 32, 64};
  int top_k = 0;
  model_flags model;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc && a != "--help" && a != "--relaxed-groups") {
      std::fprintf(stderr, "%s", usage);
      return 2;
    }
    if (model.parse(a, [&] { return std::string(argv[++i]); })) continue;
    if (a == "--trace") trace_dir = argv[++i];
    else if (a == "--top-k") top_k = std::stoi(argv[++i]);
    else if (a == "--csv") csv_path = argv[++i];
    else if (a == "--svg") svg_path = argv[++i];
    else if (a == "--batch-sizes") {
      sizes.clear();
      std::stringstream ss(argv[++i]);
      for (std::string tok; std::getline(ss, tok, ',');) sizes.push_back(std::stoi(tok));
    } else {
      std::fprintf(stderr, "%s", usage);
      return a == "--help" ? 0 : 2;
    }
  }
  try {
    generator_options g;
    model.shape_generator(g);
    trace tr = trace_dir.empty() ? generate_trace(g) : load_trace(trace_dir);
    model.load_bias(tr);
    const auto routing = model.routing();
    const int k = top_k ? top_k : (routing ? routing->top_k : (tr.top_k ? tr.top_k : std::min(8, tr.num_experts)));
    lynx::route_params base = routing && routing->num_experts == tr.num_experts ? lynx::default_params(*routing)
                                                                                : lynx::default_params(tr.num_experts, k);
    base.top_k = k;
    model.apply(base, tr);
    if (const lynx::status st = lynx::check(base); st != lynx::status::success)
      throw std::runtime_error(lynx::status_string(st));
    std::vector<std::string> family, setting;
    const auto settings = sweep(base, family, setting);
    std::vector<point> pts;
    std::ofstream csv(csv_path);
    csv << "batch_size,family,setting,unique_before,unique_after,fewer,retained_mass,top1_kept\n";
    std::printf("trace: %s (N=%d, k=%d)\nrouter: %s\n", tr.name.c_str(), tr.num_experts, k, describe(base).c_str());
    for (const int bs : sizes) {
      std::printf("\nbatch size %d\n%-16s %-44s %8s %8s %7s %9s %9s\n", bs, "family", "setting", "before", "after", "fewer",
                  "retained", "top1_kept");
      for (std::size_t i = 0; i < settings.size(); ++i) {
        router r(false, max_batch_rows(tr, bs), settings[i]);
        const summary s = evaluate(tr, settings[i], bs, r).back();
        pts.push_back({bs, family[i], setting[i], s});
        std::printf("%-16s %-44s %8.2f %8.2f %6.1f%% %9.4f %9.4f\n", family[i].c_str(), setting[i].c_str(), s.mean(s.unique_before),
                    s.mean(s.unique_after), 100 * s.fewer(), s.mean(s.retained), s.mean(s.top1_kept));
        csv << bs << ',' << family[i] << ",\"" << setting[i] << "\"," << s.mean(s.unique_before) << ',' << s.mean(s.unique_after)
            << ',' << s.fewer() << ',' << s.mean(s.retained) << ',' << s.mean(s.top1_kept) << '\n';
      }
    }
    std::vector<std::string> families;
    for (const auto& f : family)
      if (std::find(families.begin(), families.end(), f) == families.end()) families.push_back(f);
    write_svg(svg_path, pts, sizes, families, "Unique experts vs retained mass: " + tr.name);
    std::printf("\nunique experts each policy needs to keep a retained mass of 0.95 / 0.98 (interpolated on its front)\n%-16s",
                "batch size");
    for (const int bs : sizes) std::printf(" %15d", bs);
    std::printf("\n");
    for (std::size_t f = 0; f + 1 < families.size(); ++f) {
      std::printf("%-16s", families[f].c_str());
      for (const int bs : sizes) {
        const auto fr = front(pts, bs, families[f]);
        const auto cell = [](double u) { return u < 0 ? std::string("    -") : std::to_string(u).substr(0, 5); };
        std::printf("   %5s / %5s", cell(unique_at(fr, 0.95)).c_str(), cell(unique_at(fr, 0.98)).c_str());
      }
      std::printf("\n");
    }
    std::printf("%-16s", "plain top-k");
    for (const int bs : sizes)
      for (const point& p : pts)
        if (p.batch_size == bs && p.family == families.back()) std::printf("   %13.1f", p.s.mean(p.s.unique_before));
    std::printf("\n");
    std::printf("\nwrote %s and %s\n", csv_path.c_str(), svg_path.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lynx_frontier: %s\n", e.what());
    return 1;
  }
}

#pragma once
// Lynx: batch-aware expert selection for MoE decode (Gupta et al., arXiv 2411.08982).
// Everything: the stages (each header: its warp- and block-level device functions and its
// launcher), the composed step, the baseline router, the host path.

#include "affinity_bin.cuh"   // IWYU pragma: export
#include "batch.hpp"          // IWYU pragma: export
#include "half.hpp"           // IWYU pragma: export
#include "host.hpp"           // IWYU pragma: export
#include "measures.hpp"       // IWYU pragma: export
#include "params.hpp"         // IWYU pragma: export
#include "remap_topk.cuh"     // IWYU pragma: export
#include "route.cuh"          // IWYU pragma: export
#include "score_experts.cuh"  // IWYU pragma: export
#include "sorted_layout.cuh"  // IWYU pragma: export
#include "sorted_layout.hpp"  // IWYU pragma: export
#include "topk_route.cuh"     // IWYU pragma: export

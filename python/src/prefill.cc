// RaggedPrefill as a Python class: construction fixes the config (capacities), plan() takes host
// indptr arrays, run() only launches. The Python wrapper (mlakit/__init__.py) adds allocation of
// out/lse and stream selection; this layer converts arguments and releases the GIL while C++ works.
#include <cstdint>
#include <memory>
#include <string>

#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include "bindings.h"
#include "mlakit/error.h"
#include "mlakit/prefill.h"
#include "tensor_arg.h"

namespace mlakit_py {
namespace {

using mlakit::Error;
using mlakit::ErrorKind;

// Both indptr arrays, checked for matching length; batch_size = len - 1.
struct Indptrs {
  std::vector<int32_t> qo, kv;
  int batch_size = 0;
};

Indptrs read_indptrs(nb::handle qo_indptr, nb::handle kv_indptr) {
  Indptrs r;
  r.qo = host_indptr(qo_indptr, "qo_indptr");
  r.kv = host_indptr(kv_indptr, "kv_indptr");
  if (r.qo.empty())
    throw Error(ErrorKind::kInvalidArgument, "qo_indptr", "must have batch_size + 1 >= 1 entries, got 0");
  if (r.kv.size() != r.qo.size())
    throw Error(ErrorKind::kInvalidArgument, "kv_indptr",
                "has " + std::to_string(r.kv.size()) + " entries but qo_indptr has " +
                    std::to_string(r.qo.size()));
  if (r.qo.size() - 1 > static_cast<size_t>(INT32_MAX))
    throw Error(ErrorKind::kInvalidArgument, "qo_indptr", "batch too large");
  r.batch_size = static_cast<int>(r.qo.size() - 1);
  return r;
}

}  // namespace


// The Python constructor's keyword arguments -> PrefillConfig (shared by __init__ and
// workspace_sizes).
static mlakit::KvSplitMode parse_kv_split(const std::string& s) {
  if (s == "auto") return mlakit::KvSplitMode::kAuto;
  if (s == "on") return mlakit::KvSplitMode::kOn;
  if (s == "off") return mlakit::KvSplitMode::kOff;
  throw mlakit::Error(mlakit::ErrorKind::kInvalidArgument, "kv_split", "must be 'auto', 'on' or 'off', got '" + s + "'");
}

static mlakit::PrefillConfig make_config(int num_qo_heads, int num_kv_heads, int head_dim_qk, int head_dim_vo,
                                         const std::string& dtype, int max_batch, int64_t max_q_tokens,
                                         int64_t max_kv_tokens, const std::string& device,
                                         const std::string& kv_split, const std::string& out_dtype) {
  mlakit::PrefillConfig c;
  c.num_qo_heads = num_qo_heads;
  c.num_kv_heads = num_kv_heads;
  c.head_dim_qk = head_dim_qk;
  c.head_dim_vo = head_dim_vo;
  c.dtype = parse_dtype(dtype, "dtype");
  c.max_batch = max_batch;
  c.max_q_tokens = max_q_tokens;
  c.max_kv_tokens = max_kv_tokens;
  c.device = parse_device(device, "device");
  c.kv_split = parse_kv_split(kv_split);
  c.out_dtype = parse_dtype(out_dtype, "out_dtype");
  return c;
}

// The descale arguments of run() (e4m3 inputs), each None or a [batch, Hkv] float32 array.
struct DescaleArgs {
  std::optional<TensorArg> q, k, v;
  mlakit::Descales view() const {
    mlakit::Descales d;
    d.q = q ? &q->view : nullptr;
    d.k = k ? &k->view : nullptr;
    d.v = v ? &v->view : nullptr;
    return d;
  }
};
static DescaleArgs descale_args(nb::handle q, nb::handle k, nb::handle v) {
  DescaleArgs d;
  d.q = optional_tensor_arg(q, "q_descale", false);
  d.k = optional_tensor_arg(k, "k_descale", false);
  d.v = optional_tensor_arg(v, "v_descale", false);
  return d;
}

void bind_prefill(nb::module_& m) {
  nb::class_<mlakit::PlanInfo>(m, "PlanInfo", "What the last plan() decided.")
      .def_ro("batch_size", &mlakit::PlanInfo::batch_size)
      .def_ro("total_q", &mlakit::PlanInfo::total_q)
      .def_ro("total_kv", &mlakit::PlanInfo::total_kv)
      .def_ro("num_tiles", &mlakit::PlanInfo::num_tiles, "(sequence, q-tile) pairs; each runs once per q head")
      .def_ro("block_m", &mlakit::PlanInfo::block_m, "q rows per tile")
      .def_ro("block_n", &mlakit::PlanInfo::block_n, "kv rows per inner step")
      .def_ro("grid_blocks", &mlakit::PlanInfo::grid_blocks, "persistent blocks run() launches")
      .def_ro("visible_pairs", &mlakit::PlanInfo::visible_pairs,
              "unmasked (query, key) pairs summed over the batch, per head")
      .def_ro("kernel_arch", &mlakit::PlanInfo::kernel_arch, "0: CPU backend; 80 or 90: the CUDA kernel")
      .def_ro("kv_split", &mlakit::PlanInfo::kv_split, "this object splits key ranges (kv_split resolved)")
      .def_ro("split_slots", &mlakit::PlanInfo::split_slots,
              "(q tile, head) pairs this plan runs as two halves of the key range")
      .def_prop_ro(
          "cpu_isa", [](const mlakit::PlanInfo& i) { return std::string(i.cpu_isa); },
          "CPU backend: the products run() takes, 'amx', 'avx512bf16' or 'fp32'; '' for CUDA")
      .def("__repr__", [](const mlakit::PlanInfo& i) {
        return "PlanInfo(batch_size=" + std::to_string(i.batch_size) + ", total_q=" + std::to_string(i.total_q) +
               ", total_kv=" + std::to_string(i.total_kv) + ", num_tiles=" + std::to_string(i.num_tiles) +
               ", block_m=" + std::to_string(i.block_m) + ", block_n=" + std::to_string(i.block_n) +
               ", grid_blocks=" + std::to_string(i.grid_blocks) +
               ", visible_pairs=" + std::to_string(i.visible_pairs) +
               ", kernel_arch=" + std::to_string(i.kernel_arch) + ", split_slots=" + std::to_string(i.split_slots) +
               (i.cpu_isa[0] != '\0' ? std::string(", cpu_isa='") + i.cpu_isa + "'" : std::string()) + ")";
      });

  nb::class_<mlakit::RaggedPrefill>(m, "RaggedPrefill",
                                    "Ragged prefill attention with a plan/run split (native object).")
      .def("__init__",
           [](mlakit::RaggedPrefill* self, int num_qo_heads, int num_kv_heads, int head_dim_qk, int head_dim_vo,
              const std::string& dtype, int max_batch, int64_t max_q_tokens, int64_t max_kv_tokens,
              const std::string& device, const std::string& kv_split, const std::string& out_dtype) {
             new (self) mlakit::RaggedPrefill(make_config(num_qo_heads, num_kv_heads, head_dim_qk,
                                                          head_dim_vo, dtype, max_batch, max_q_tokens,
                                                          max_kv_tokens, device, kv_split, out_dtype));
           },
           nb::arg("num_qo_heads"), nb::arg("num_kv_heads"), nb::arg("head_dim_qk"), nb::arg("head_dim_vo"),
           nb::arg("dtype"), nb::arg("max_batch"), nb::arg("max_q_tokens"), nb::arg("max_kv_tokens"),
           nb::arg("device"), nb::arg("kv_split") = "auto", nb::arg("out_dtype") = "bf16")
      .def(
          "plan",
          [](mlakit::RaggedPrefill& self, nb::handle qo_indptr, nb::handle kv_indptr,
             const mlakit::PrefillOptions& options, uintptr_t stream) {
            Indptrs ip = read_indptrs(qo_indptr, kv_indptr);
            nb::gil_scoped_release release;
            self.plan(ip.qo.data(), ip.kv.data(), ip.batch_size, options, as_stream(stream));
          },
          nb::arg("qo_indptr").none(), nb::arg("kv_indptr").none(), nb::arg("options"), nb::arg("stream"))
      .def(
          "run",
          [](const mlakit::RaggedPrefill& self, nb::handle q, nb::handle k, nb::handle v, nb::handle out,
             nb::handle lse, nb::handle stream, bool lse_head_major, nb::handle q_descale, nb::handle k_descale,
             nb::handle v_descale) -> nb::object {
            TensorArg tq = tensor_arg(q, "q", false), tk = tensor_arg(k, "k", false),
                      tv = tensor_arg(v, "v", false);
            nb::object out_obj = nb::borrow(out);
            if (out.is_none() && tq.view.ndim == 3 && is_torch_tensor(q)) {
              // The eager call without out=: q.new_empty(rows, heads, Dvo), as the Python layer
              // would allocate it, made here so the call costs one Python-level call, not two.
              // e4m3 inputs: in the config's output dtype.
              const mlakit::PrefillConfig& c = self.config();
              out_obj = c.dtype == mlakit::DType::kE4M3
                            ? torch_new_empty(q, tq.view.shape[0], tq.view.shape[1], c.head_dim_vo, c.out_dtype)
                            : torch_new_empty(q, tq.view.shape[0], tq.view.shape[1], c.head_dim_vo);
            }
            TensorArg to = tensor_arg(out_obj, "out", true);
            std::optional<TensorArg> tl = optional_tensor_arg(lse, "lse", true);
            if (tl && lse_head_major) transpose_2d(&tl->view, "lse");
            const DescaleArgs d = descale_args(q_descale, k_descale, v_descale);
            mlakit::Stream s = stream_arg(stream, tq);
            {
              nb::gil_scoped_release release;
              self.run(tq.view, tk.view, tv.view, to.view, tl ? &tl->view : nullptr, d.view(), s);
            }
            return out_obj;
          },
          nb::arg("q").none(), nb::arg("k").none(), nb::arg("v").none(), nb::arg("out").none(), nb::arg("lse").none(),
          nb::arg("stream").none(), nb::arg("lse_head_major") = false, nb::arg("q_descale").none() = nb::none(),
          nb::arg("k_descale").none() = nb::none(), nb::arg("v_descale").none() = nb::none(),
          "Launches for the current plan; returns out. Tensors: torch tensors, descriptor tuples or DLPack "
          "arrays; out None with a torch q: allocated as q.new_empty(rows, heads, Dvo). "
          "stream: a cudaStream_t as an int, or None for PyTorch's current stream on q's device (0 "
          "for a CPU or non-torch q). lse_head_major: lse is given [H, rows] (FlashAttention's "
          "layout) and read as its transpose. q_descale / k_descale / v_descale: e4m3 inputs' float32 "
          "[>= batch, Hkv] descale factors (None = 1).")
      .def_prop_ro("planned", &mlakit::RaggedPrefill::planned)
      .def("info", &mlakit::RaggedPrefill::info)
      .def_prop_ro("num_qo_heads", [](const mlakit::RaggedPrefill& s) { return s.config().num_qo_heads; })
      .def_prop_ro("num_kv_heads", [](const mlakit::RaggedPrefill& s) { return s.config().num_kv_heads; })
      .def_prop_ro("head_dim_qk", [](const mlakit::RaggedPrefill& s) { return s.config().head_dim_qk; })
      .def_prop_ro("head_dim_vo", [](const mlakit::RaggedPrefill& s) { return s.config().head_dim_vo; })
      .def_prop_ro("dtype", [](const mlakit::RaggedPrefill& s) { return std::string(mlakit::dtype_name(s.config().dtype)); })
      .def_prop_ro("out_dtype",
                   [](const mlakit::RaggedPrefill& s) {
                     const mlakit::PrefillConfig& c = s.config();
                     return std::string(mlakit::dtype_name(c.dtype == mlakit::DType::kE4M3 ? c.out_dtype : c.dtype));
                   },
                   "the output's dtype: the input dtype, or out_dtype for e4m3 inputs")
      .def_prop_ro("device", [](const mlakit::RaggedPrefill& s) { return mlakit::to_string(s.config().device); })
      .def_prop_ro("max_batch", [](const mlakit::RaggedPrefill& s) { return s.config().max_batch; })
      .def_prop_ro("max_q_tokens", [](const mlakit::RaggedPrefill& s) { return s.config().max_q_tokens; })
      .def_prop_ro("max_kv_tokens", [](const mlakit::RaggedPrefill& s) { return s.config().max_kv_tokens; })
      .def_prop_ro("options", [](const mlakit::RaggedPrefill& s) { return s.options(); },
                   "options of the current plan (a copy)")
      .def_prop_ro("causal", [](const mlakit::RaggedPrefill& s) { return s.options().causal; })
      .def_prop_ro("sm_scale", [](const mlakit::RaggedPrefill& s) { return s.options().sm_scale; })
      .def_prop_ro("window_left", [](const mlakit::RaggedPrefill& s) { return s.options().window_left; })
      .def_prop_ro("logits_soft_cap", [](const mlakit::RaggedPrefill& s) { return s.options().logits_soft_cap; })
      .def_static(
          "workspace_sizes",
          [](int num_qo_heads, int num_kv_heads, int head_dim_qk, int head_dim_vo, const std::string& dtype,
             int max_batch, int64_t max_q_tokens, int64_t max_kv_tokens, const std::string& device,
             const std::string& kv_split, const std::string& out_dtype) {
            mlakit::WorkspaceSizes w = mlakit::RaggedPrefill::workspace_sizes(
                make_config(num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo, dtype, max_batch,
                            max_q_tokens, max_kv_tokens, device, kv_split, out_dtype));
            return nb::make_tuple(w.host_bytes, w.device_bytes);
          },
          nb::arg("num_qo_heads"), nb::arg("num_kv_heads"), nb::arg("head_dim_qk"), nb::arg("head_dim_vo"),
          nb::arg("dtype"), nb::arg("max_batch"), nb::arg("max_q_tokens"), nb::arg("max_kv_tokens"),
          nb::arg("device"), nb::arg("kv_split") = "auto", nb::arg("out_dtype") = "bf16",
          "(host_bytes, device_bytes) the object would allocate.");

  m.def(
      "ragged_prefill",
      [](nb::handle q, nb::handle k, nb::handle v, nb::handle qo_indptr, nb::handle kv_indptr,
         const mlakit::PrefillOptions& options, nb::handle out, nb::handle lse, nb::handle stream) {
        Indptrs ip = read_indptrs(qo_indptr, kv_indptr);
        TensorArg tq = tensor_arg(q, "q", false), tk = tensor_arg(k, "k", false), tv = tensor_arg(v, "v", false),
                  to = tensor_arg(out, "out", true);
        std::optional<TensorArg> tl = optional_tensor_arg(lse, "lse", true);
        mlakit::Stream s = stream_arg(stream, tq);
        nb::gil_scoped_release release;
        mlakit::ragged_prefill(tq.view, tk.view, tv.view, ip.qo.data(), ip.kv.data(), ip.batch_size, options,
                               to.view, tl ? &tl->view : nullptr, s);
      },
      nb::arg("q").none(), nb::arg("k").none(), nb::arg("v").none(), nb::arg("qo_indptr").none(),
      nb::arg("kv_indptr").none(), nb::arg("options"), nb::arg("out").none(), nb::arg("lse").none(),
      nb::arg("stream").none());
}

}  // namespace mlakit_py

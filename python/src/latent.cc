// LatentAttention as a Python class (the native half; mlakit/latent.py is the public wrapper):
// construction fixes the config, plan() takes host arrays (lengths, a block table read through
// its strides), run() only launches one layer on the given stream. The GIL is released while
// C++ works.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/stl/string.h>

#include "bindings.h"
#include "mlakit/error.h"
#include "mlakit/latent.h"
#include "tensor_arg.h"

namespace mlakit_py {
namespace {

// Whether an array lives in CUDA device memory (DLPack device type 2), as an engine's device
// block table does.
bool on_cuda_device(nb::handle obj) {
  if (!nb::hasattr(obj, "__dlpack_device__")) return false;
  const nb::object d = obj.attr("__dlpack_device__")();
  return nb::cast<int>(d[0]) == 2;
}


using mlakit::Error;
using mlakit::ErrorKind;

mlakit::LatentIndices parse_indices(const std::string& s) {
  if (s == "positions") return mlakit::LatentIndices::kPositions;
  if (s == "slots") return mlakit::LatentIndices::kSlots;
  throw Error(ErrorKind::kInvalidArgument, "indices", "must be 'positions' or 'slots', got '" + s + "'");
}

mlakit::LatentConfig make_config(int num_heads, int kv_lora_rank, int qk_rope_head_dim, const std::string& dtype,
                                 const std::string& kv_cache_dtype, int block_size, int64_t num_blocks,
                                 int max_batch, int64_t max_q_tokens, int64_t max_kv_tokens, int max_topk,
                                 int kv_split_size, const std::string& device, bool upload_in_run,
                                 int64_t max_decoded_rows) {
  mlakit::LatentConfig c;
  c.num_heads = num_heads;
  c.kv_lora_rank = kv_lora_rank;
  c.qk_rope_head_dim = qk_rope_head_dim;
  c.dtype = parse_dtype(dtype, "dtype");
  c.kv_cache_dtype = parse_kv_cache_dtype(kv_cache_dtype);
  c.block_size = block_size;
  c.num_blocks = num_blocks;
  c.max_batch = max_batch;
  c.max_q_tokens = max_q_tokens;
  c.max_kv_tokens = max_kv_tokens;
  c.max_topk = max_topk;
  c.kv_split_size = kv_split_size;
  c.device = parse_device(device, "device");
  c.upload_in_run = upload_in_run;
  c.max_decoded_rows = max_decoded_rows;
  return c;
}

mlakit::LatentFp8Decode parse_fp8_decode(const std::string& s) {
  if (s == "auto") return mlakit::LatentFp8Decode::kAuto;
  if (s == "once") return mlakit::LatentFp8Decode::kOnce;
  if (s == "in_kernel") return mlakit::LatentFp8Decode::kInKernel;
  throw Error(ErrorKind::kInvalidArgument, "fp8_decode", "must be 'auto', 'once' or 'in_kernel', got '" + s + "'");
}

#define MLAKIT_LATENT_CONFIG_ARGS                                                                             \
  nb::arg("num_heads"), nb::arg("kv_lora_rank"), nb::arg("qk_rope_head_dim"), nb::arg("dtype"),              \
      nb::arg("kv_cache_dtype"), nb::arg("block_size"), nb::arg("num_blocks"), nb::arg("max_batch"),         \
      nb::arg("max_q_tokens"), nb::arg("max_kv_tokens"), nb::arg("max_topk"), nb::arg("kv_split_size"),      \
      nb::arg("device"), nb::arg("upload_in_run"), nb::arg("max_decoded_rows")

std::string str(int64_t x) { return std::to_string(x); }

}  // namespace

void bind_latent(nb::module_& m) {
  nb::class_<mlakit::LatentPlanInfo>(m, "LatentPlanInfo", "What the last LatentAttention.plan() decided.")
      .def_ro("batch_size", &mlakit::LatentPlanInfo::batch_size)
      .def_ro("total_q", &mlakit::LatentPlanInfo::total_q)
      .def_ro("total_kv", &mlakit::LatentPlanInfo::total_kv)
      .def_ro("sparse", &mlakit::LatentPlanInfo::sparse)
      .def_ro("topk", &mlakit::LatentPlanInfo::topk)
      .def_ro("num_items", &mlakit::LatentPlanInfo::num_items)
      .def_ro("num_merges", &mlakit::LatentPlanInfo::num_merges)
      .def_ro("partial_rows", &mlakit::LatentPlanInfo::partial_rows)
      .def_ro("block_rows", &mlakit::LatentPlanInfo::block_rows)
      .def_ro("kv_split_size", &mlakit::LatentPlanInfo::kv_split_size)
      .def_ro("visible_pairs", &mlakit::LatentPlanInfo::visible_pairs)
      .def_ro("decoded_rows", &mlakit::LatentPlanInfo::decoded_rows)
      .def_prop_ro("cpu_isa", [](const mlakit::LatentPlanInfo& i) { return std::string(i.cpu_isa); })
      .def("__repr__", [](const mlakit::LatentPlanInfo& i) {
        return "LatentPlanInfo(batch_size=" + str(i.batch_size) + ", total_q=" + str(i.total_q) +
               ", total_kv=" + str(i.total_kv) + ", sparse=" + (i.sparse ? "True" : "False") +
               ", topk=" + str(i.topk) + ", num_items=" + str(i.num_items) + ", num_merges=" + str(i.num_merges) +
               ", partial_rows=" + str(i.partial_rows) + ", block_rows=" + str(i.block_rows) +
               ", kv_split_size=" + str(i.kv_split_size) + ", visible_pairs=" + str(i.visible_pairs) +
               ", decoded_rows=" + str(i.decoded_rows) + ", cpu_isa='" + i.cpu_isa + "')";
      });

  nb::class_<mlakit::LatentAttention>(m, "LatentAttention", "Latent-space MLA attention (native object).")
      .def("__init__",
           [](mlakit::LatentAttention* self, int num_heads, int kv_lora_rank, int qk_rope_head_dim,
              const std::string& dtype, const std::string& kv_cache_dtype, int block_size, int64_t num_blocks,
              int max_batch, int64_t max_q_tokens, int64_t max_kv_tokens, int max_topk, int kv_split_size,
              const std::string& device, bool upload_in_run, int64_t max_decoded_rows) {
             new (self) mlakit::LatentAttention(make_config(num_heads, kv_lora_rank, qk_rope_head_dim, dtype,
                                                            kv_cache_dtype, block_size, num_blocks, max_batch,
                                                            max_q_tokens, max_kv_tokens, max_topk, kv_split_size,
                                                            device, upload_in_run, max_decoded_rows));
           },
           MLAKIT_LATENT_CONFIG_ARGS)
      .def(
          "plan",
          [](mlakit::LatentAttention& self, nb::handle query_lens, nb::handle kv_lens, nb::handle block_table,
             int block_table_cols, float sm_scale, bool causal, int topk, const std::string& indices,
             bool batch_invariant, const std::string& fp8_decode, uintptr_t stream) {
            const std::vector<int32_t> q = host_indptr(query_lens, "query_lens");
            std::vector<int32_t> kv, bt;
            mlakit::LatentBatch b;
            b.batch_size = static_cast<int>(q.size());
            b.query_lens = q.data();
            if (!kv_lens.is_none()) {
              kv = host_indptr(kv_lens, "kv_lens");
              if (kv.size() != q.size())
                throw Error(ErrorKind::kInvalidArgument, "kv_lens",
                            "has " + str(static_cast<int64_t>(kv.size())) + " entries but query_lens has " +
                                str(static_cast<int64_t>(q.size())));
              b.kv_lens = kv.data();
            }
            std::optional<TensorArg> device_table;  // keeps a device table's producer alive for the call
            if (!block_table.is_none() && on_cuda_device(block_table)) {
              // The engine's device block table: run() reads it where it is (LatentBatch::
              // device_block_table), through its row stride.
              device_table = tensor_arg(block_table, "block_table", false);
              const mlakit::TensorView& v = device_table->view;
              if (v.ndim != 2 || v.dtype != mlakit::DType::kInt32 || v.strides[1] != 1 || v.strides[0] <= 0)
                throw Error(ErrorKind::kInvalidArgument, "block_table",
                            "on a GPU must be a 2-D int32 array [batch_size, cols] with contiguous rows");
              if (v.device != self.config().device)
                throw Error(ErrorKind::kInvalidArgument, "block_table",
                            "is on " + mlakit::to_string(v.device) + " but the object is on " +
                                mlakit::to_string(self.config().device));
              if (v.shape[0] != static_cast<int64_t>(q.size()))
                throw Error(ErrorKind::kInvalidArgument, "block_table",
                            "has " + str(v.shape[0]) + " rows but query_lens has " +
                                str(static_cast<int64_t>(q.size())) + " entries");
              b.device_block_table = static_cast<const int32_t*>(v.data);
              b.block_table_cols = static_cast<int>(v.strides[0]);
            } else if (!block_table.is_none()) {
              int64_t table_cols = -1;  // set when block_table comes as a 2-D array
              bt = host_indptr(block_table, "block_table", &table_cols);
              if (block_table_cols == 0 && table_cols > 0) block_table_cols = static_cast<int>(table_cols);
              if (table_cols >= 0 && table_cols != block_table_cols)
                throw Error(ErrorKind::kInvalidArgument, "block_table",
                            "has " + str(table_cols) + " columns but block_table_cols is " + str(block_table_cols));
              if (block_table_cols <= 0 || bt.size() != q.size() * static_cast<size_t>(block_table_cols))
                throw Error(ErrorKind::kInvalidArgument, "block_table",
                            "must be [batch_size, cols] with cols > 0; got " + str(static_cast<int64_t>(bt.size())) +
                                " entries for " + str(static_cast<int64_t>(q.size())) + " requests");
              b.block_table = bt.data();
              b.block_table_cols = block_table_cols;
            }
            mlakit::LatentPlanOptions o;
            o.sm_scale = sm_scale;
            o.causal = causal;
            o.topk = topk;
            o.indices = parse_indices(indices);
            o.batch_invariant = batch_invariant;
            o.fp8_decode = parse_fp8_decode(fp8_decode);
            nb::gil_scoped_release release;
            self.plan(b, o, as_stream(stream));
          },
          nb::arg("query_lens").none(), nb::arg("kv_lens").none(), nb::arg("block_table").none(),
          nb::arg("block_table_cols"), nb::arg("sm_scale"), nb::arg("causal"), nb::arg("topk"), nb::arg("indices"),
          nb::arg("batch_invariant"), nb::arg("fp8_decode"), nb::arg("stream"))
      .def(
          "run",
          [](const mlakit::LatentAttention& self, nb::handle q, nb::handle q_pe, nb::handle kv_cache,
             nb::handle indices, nb::handle topk_length, nb::handle attn_sink, nb::handle k_scale, nb::handle out,
             nb::handle lse, nb::handle max_logits, bool lse_head_major, nb::handle stream) {
            TensorArg tq = tensor_arg(q, "q", false), tc = tensor_arg(kv_cache, "kv_cache", false),
                      to = tensor_arg(out, "out", true);
            std::optional<TensorArg> tp = optional_tensor_arg(q_pe, "q_pe", false),
                                     ti = optional_tensor_arg(indices, "indices", false),
                                     tk = optional_tensor_arg(topk_length, "topk_length", false),
                                     ts = optional_tensor_arg(attn_sink, "attn_sink", false),
                                     tks = optional_tensor_arg(k_scale, "k_scale", false),
                                     tl = optional_tensor_arg(lse, "lse", true),
                                     tm = optional_tensor_arg(max_logits, "max_logits", true);
            // [H, rows] buffers (FlashAttention's layout) are read as the [rows, H] the library takes.
            if (tl && lse_head_major) transpose_2d(&tl->view, "lse");
            if (tm && lse_head_major) transpose_2d(&tm->view, "max_logits");
            mlakit::LatentLayer y;
            y.q = tq.view;
            y.q_pe = tp ? &tp->view : nullptr;
            y.kv_cache = tc.view;
            y.indices = ti ? &ti->view : nullptr;
            y.topk_length = tk ? &tk->view : nullptr;
            y.attn_sink = ts ? &ts->view : nullptr;
            y.k_scale = tks ? &tks->view : nullptr;
            y.max_logits = tm ? &tm->view : nullptr;
            mlakit::Stream s = stream_arg(stream, tq);
            nb::gil_scoped_release release;
            self.run(y, to.view, tl ? &tl->view : nullptr, s);
          },
          nb::arg("q").none(), nb::arg("q_pe").none(), nb::arg("kv_cache").none(), nb::arg("indices").none(),
          nb::arg("topk_length").none(), nb::arg("attn_sink").none(), nb::arg("k_scale").none(), nb::arg("out").none(),
          nb::arg("lse").none(),
          nb::arg("max_logits").none(), nb::arg("lse_head_major"), nb::arg("stream").none())
      .def_prop_ro("planned", &mlakit::LatentAttention::planned)
      .def("info", &mlakit::LatentAttention::info)
      .def_prop_ro("num_heads", [](const mlakit::LatentAttention& s) { return s.config().num_heads; })
      .def_prop_ro("kv_lora_rank", [](const mlakit::LatentAttention& s) { return s.config().kv_lora_rank; })
      .def_prop_ro("qk_rope_head_dim", [](const mlakit::LatentAttention& s) { return s.config().qk_rope_head_dim; })
      .def_prop_ro("block_size", [](const mlakit::LatentAttention& s) { return s.config().block_size; })
      .def_prop_ro("num_blocks", [](const mlakit::LatentAttention& s) { return s.config().num_blocks; })
      .def_prop_ro("max_batch", [](const mlakit::LatentAttention& s) { return s.config().max_batch; })
      .def_prop_ro("max_q_tokens", [](const mlakit::LatentAttention& s) { return s.config().max_q_tokens; })
      .def_prop_ro("max_kv_tokens", [](const mlakit::LatentAttention& s) { return s.config().max_kv_tokens; })
      .def_prop_ro("max_topk", [](const mlakit::LatentAttention& s) { return s.config().max_topk; })
      .def_prop_ro("max_decoded_rows", [](const mlakit::LatentAttention& s) { return s.config().max_decoded_rows; })
      .def_prop_ro("dtype",
                   [](const mlakit::LatentAttention& s) { return std::string(mlakit::dtype_name(s.config().dtype)); })
      .def_prop_ro("device", [](const mlakit::LatentAttention& s) { return mlakit::to_string(s.config().device); })
      .def_prop_ro("causal", [](const mlakit::LatentAttention& s) { return s.options().causal; })
      .def_prop_ro("sm_scale", [](const mlakit::LatentAttention& s) { return s.options().sm_scale; })
      .def_prop_ro("topk", [](const mlakit::LatentAttention& s) { return s.options().topk; })
      .def_static(
          "workspace_sizes",
          [](int num_heads, int kv_lora_rank, int qk_rope_head_dim, const std::string& dtype,
             const std::string& kv_cache_dtype, int block_size, int64_t num_blocks, int max_batch, int64_t max_q_tokens,
             int64_t max_kv_tokens, int max_topk, int kv_split_size, const std::string& device, bool upload_in_run,
             int64_t max_decoded_rows) {
            const mlakit::WorkspaceSizes w = mlakit::LatentAttention::workspace_sizes(
                make_config(num_heads, kv_lora_rank, qk_rope_head_dim, dtype, kv_cache_dtype, block_size, num_blocks,
                            max_batch, max_q_tokens, max_kv_tokens, max_topk, kv_split_size, device, upload_in_run,
                            max_decoded_rows));
            return nb::make_tuple(w.host_bytes, w.device_bytes);
          },
          MLAKIT_LATENT_CONFIG_ARGS);
}

}  // namespace mlakit_py

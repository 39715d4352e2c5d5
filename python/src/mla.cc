// MlaStep as a Python class (the native half; mlakit/mla.py is the public wrapper): construction
// fixes the config, plan() takes host arrays (lengths, a flattened block table), run() only
// launches one layer on the given stream. The GIL is released while C++ works.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/stl/string.h>

#include "bindings.h"
#include "mlakit/error.h"
#include "mlakit/graph.h"
#include "mlakit/mla.h"
#include "tensor_arg.h"

namespace mlakit_py {

using mlakit::Error;
using mlakit::ErrorKind;

mlakit::KvCacheDtype parse_kv_cache_dtype(const std::string& s) {
  if (s == "auto") return mlakit::KvCacheDtype::kAuto;
  if (s == "fp8" || s == "fp8_e4m3") return mlakit::KvCacheDtype::kFp8;
  if (s == "fp8_ds_mla") return mlakit::KvCacheDtype::kFp8DsMla;
  if (s == "fp8_e5m2")
    throw Error(ErrorKind::kUnsupported, "kv_cache_dtype", "e5m2 latent caches are not supported (fp8 is e4m3)");
  throw Error(ErrorKind::kInvalidArgument, "kv_cache_dtype",
              "must be 'auto', 'fp8' ('fp8_e4m3') or 'fp8_ds_mla', got '" + s + "'");
}

namespace {

mlakit::MlaConfig make_config(int num_heads, int kv_lora_rank, int qk_nope_head_dim, int qk_rope_head_dim,
                              int v_head_dim, const std::string& dtype, int block_size, int64_t num_blocks,
                              int max_batch, int64_t max_tokens, int64_t max_context_tokens,
                              int64_t workspace_rows, const std::string& device, bool upload_in_run,
                              bool fp8_attention, const std::string& kv_cache_dtype, int absorb_max_query_len,
                              int64_t max_absorbed_tokens, int max_topk, int64_t max_decoded_rows) {
  mlakit::MlaConfig c;
  c.num_heads = num_heads;
  c.kv_lora_rank = kv_lora_rank;
  c.qk_nope_head_dim = qk_nope_head_dim;
  c.qk_rope_head_dim = qk_rope_head_dim;
  c.v_head_dim = v_head_dim;
  c.dtype = parse_dtype(dtype, "dtype");
  c.block_size = block_size;
  c.num_blocks = num_blocks;
  c.max_batch = max_batch;
  c.max_tokens = max_tokens;
  c.max_context_tokens = max_context_tokens;
  c.workspace_rows = workspace_rows;
  c.device = parse_device(device, "device");
  c.upload_in_run = upload_in_run;
  c.fp8_attention = fp8_attention;
  c.kv_cache_dtype = parse_kv_cache_dtype(kv_cache_dtype);
  c.absorb_max_query_len = absorb_max_query_len;
  c.max_absorbed_tokens = max_absorbed_tokens;
  c.max_topk = max_topk;
  c.max_decoded_rows = max_decoded_rows;
  return c;
}

}  // namespace

void bind_mla(nb::module_& m) {
  nb::class_<mlakit::MlaPlanInfo>(m, "MlaPlanInfo", "What the last MlaStep.plan() decided.")
      .def_ro("batch_size", &mlakit::MlaPlanInfo::batch_size)
      .def_ro("total_q", &mlakit::MlaPlanInfo::total_q)
      .def_ro("total_context", &mlakit::MlaPlanInfo::total_context)
      .def_ro("chunked", &mlakit::MlaPlanInfo::chunked)
      .def_ro("num_context_chunks", &mlakit::MlaPlanInfo::num_context_chunks)
      .def_ro("launch_rows", &mlakit::MlaPlanInfo::launch_rows)
      .def_ro("visible_pairs", &mlakit::MlaPlanInfo::visible_pairs)
      .def_ro("absorbed_requests", &mlakit::MlaPlanInfo::absorbed_requests)
      .def_ro("absorbed_tokens", &mlakit::MlaPlanInfo::absorbed_tokens)
      .def_ro("absorb_max_query_len", &mlakit::MlaPlanInfo::absorb_max_query_len)
      .def_ro("sparse_tokens", &mlakit::MlaPlanInfo::sparse_tokens)
      .def("__repr__", [](const mlakit::MlaPlanInfo& i) {
        return "MlaPlanInfo(batch_size=" + std::to_string(i.batch_size) + ", total_q=" + std::to_string(i.total_q) +
               ", total_context=" + std::to_string(i.total_context) + ", chunked=" + (i.chunked ? "True" : "False") +
               ", num_context_chunks=" + std::to_string(i.num_context_chunks) +
               ", launch_rows=" + std::to_string(i.launch_rows) + ", visible_pairs=" + std::to_string(i.visible_pairs) +
               ", absorbed_requests=" + std::to_string(i.absorbed_requests) +
               ", absorbed_tokens=" + std::to_string(i.absorbed_tokens) +
               ", absorb_max_query_len=" + std::to_string(i.absorb_max_query_len) +
               ", sparse_tokens=" + std::to_string(i.sparse_tokens) + ")";
      });

  nb::class_<mlakit::MlaStep>(m, "MlaStep", "The MLA prefill step (native object).")
      .def("__init__",
           [](mlakit::MlaStep* self, int num_heads, int kv_lora_rank, int qk_nope_head_dim, int qk_rope_head_dim,
              int v_head_dim, const std::string& dtype, int block_size, int64_t num_blocks, int max_batch,
              int64_t max_tokens, int64_t max_context_tokens, int64_t workspace_rows, const std::string& device,
              bool upload_in_run, bool fp8_attention, const std::string& kv_cache_dtype, int absorb_max_query_len,
              int64_t max_absorbed_tokens, int max_topk, int64_t max_decoded_rows) {
             new (self) mlakit::MlaStep(make_config(num_heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
                                                    v_head_dim, dtype, block_size, num_blocks, max_batch, max_tokens,
                                                    max_context_tokens, workspace_rows, device, upload_in_run,
                                                    fp8_attention, kv_cache_dtype, absorb_max_query_len,
                                                    max_absorbed_tokens, max_topk, max_decoded_rows));
           },
           nb::arg("num_heads"), nb::arg("kv_lora_rank"), nb::arg("qk_nope_head_dim"), nb::arg("qk_rope_head_dim"),
           nb::arg("v_head_dim"), nb::arg("dtype"), nb::arg("block_size"), nb::arg("num_blocks"),
           nb::arg("max_batch"), nb::arg("max_tokens"), nb::arg("max_context_tokens"), nb::arg("workspace_rows"),
           nb::arg("device"), nb::arg("upload_in_run") = false, nb::arg("fp8_attention") = false,
           nb::arg("kv_cache_dtype") = "auto", nb::arg("absorb_max_query_len") = -1,
           nb::arg("max_absorbed_tokens") = 0, nb::arg("max_topk") = 0, nb::arg("max_decoded_rows") = 0)
      .def(
          "plan",
          [](mlakit::MlaStep& self, nb::handle query_lens, nb::handle context_lens, nb::handle block_table,
             int block_table_cols, nb::handle slot_mapping, float sm_scale, int64_t graph_rows, uintptr_t stream,
             const mlakit::StreamGraph* replay, int64_t graph_absorbed_tokens, int topk) {
            const std::vector<int32_t> q = host_indptr(query_lens, "query_lens");
            const std::vector<int32_t> ctx = host_indptr(context_lens, "context_lens");
            int64_t table_cols = -1;  // set when block_table comes as a 2-D array
            const std::vector<int32_t> bt = host_indptr(block_table, "block_table", &table_cols);
            // 0: the columns of the 2-D array (the wrapper passes a torch block table as it is).
            if (block_table_cols == 0 && table_cols > 0) block_table_cols = static_cast<int>(table_cols);
            if (table_cols >= 0 && table_cols != block_table_cols)
              throw Error(ErrorKind::kInvalidArgument, "block_table",
                          "has " + std::to_string(table_cols) + " columns but block_table_cols is " +
                              std::to_string(block_table_cols));
            if (ctx.size() != q.size())
              throw Error(ErrorKind::kInvalidArgument, "context_lens",
                          "has " + std::to_string(ctx.size()) + " entries but query_lens has " + std::to_string(q.size()));
            if (block_table_cols <= 0 || bt.size() != q.size() * static_cast<size_t>(block_table_cols))
              throw Error(ErrorKind::kInvalidArgument, "block_table",
                          "must be [batch_size, cols] with cols > 0; got " + std::to_string(bt.size()) +
                              " entries for " + std::to_string(q.size()) + " requests");
            std::vector<int64_t> slots;
            if (!slot_mapping.is_none()) {
              const std::vector<int32_t> s = host_indptr(slot_mapping, "slot_mapping");
              slots.assign(s.begin(), s.end());
            }
            mlakit::MlaBatch b;
            b.batch_size = static_cast<int>(q.size());
            b.query_lens = q.data();
            b.context_lens = ctx.data();
            b.block_table = bt.data();
            b.block_table_cols = block_table_cols;
            int64_t total_q = 0;
            for (int32_t x : q) total_q += x;
            if (!slot_mapping.is_none()) {
              if (static_cast<int64_t>(slots.size()) != total_q)
                throw Error(ErrorKind::kInvalidArgument, "slot_mapping",
                            "has " + std::to_string(slots.size()) + " entries but the step has " +
                                std::to_string(total_q) + " new tokens");
              b.slot_mapping = slots.data();
            }
            mlakit::MlaPlanOptions o;
            o.sm_scale = sm_scale;
            o.graph_rows = graph_rows;
            o.graph_absorbed_tokens = graph_absorbed_tokens;
            o.topk = topk;
            nb::gil_scoped_release release;
            self.plan(b, o, as_stream(stream));
            // A graph of the step's layers launched in the same native call: one Python -> C++
            // crossing per engine step. A rejected plan above throws before this.
            if (replay) replay->launch(as_stream(stream));
          },
          nb::arg("query_lens").none(), nb::arg("context_lens").none(), nb::arg("block_table").none(),
          nb::arg("block_table_cols"), nb::arg("slot_mapping").none(), nb::arg("sm_scale"), nb::arg("graph_rows"),
          nb::arg("stream"), nb::arg("replay").none() = nb::none(), nb::arg("graph_absorbed_tokens") = -1,
          nb::arg("topk") = 0)
      .def(
          "run",
          [](const mlakit::MlaStep& self, nb::handle q, nb::handle kv_c, nb::handle k_pe, nb::handle kv_b_proj,
             nb::handle kv_cache, nb::handle out, nb::handle lse, nb::handle stream, nb::handle k_scale,
             nb::handle indices, nb::handle topk_length) {
            TensorArg tq = tensor_arg(q, "q", false), tc = tensor_arg(kv_c, "kv_c", false),
                      tp = tensor_arg(k_pe, "k_pe", false), tw = tensor_arg(kv_b_proj, "kv_b_proj", false),
                      tk = tensor_arg(kv_cache, "kv_cache", true), to = tensor_arg(out, "out", true);
            std::optional<TensorArg> tl = optional_tensor_arg(lse, "lse", true);
            std::optional<TensorArg> ts = optional_tensor_arg(k_scale, "k_scale", false);
            std::optional<TensorArg> ti = optional_tensor_arg(indices, "indices", false);
            std::optional<TensorArg> tn = optional_tensor_arg(topk_length, "topk_length", false);
            mlakit::MlaLayer y{tq.view, tc.view, tp.view, tw.view, tk.view};
            if (ts) y.k_scale = ts->view;
            if (ti) y.indices = &ti->view;
            if (tn) y.topk_length = &tn->view;
            mlakit::Stream s = stream_arg(stream, tq);
            nb::gil_scoped_release release;
            self.run(y, to.view, tl ? &tl->view : nullptr, s);
          },
          nb::arg("q").none(), nb::arg("kv_c").none(), nb::arg("k_pe").none(), nb::arg("kv_b_proj").none(),
          nb::arg("kv_cache").none(), nb::arg("out").none(), nb::arg("lse").none(), nb::arg("stream").none(),
          nb::arg("k_scale").none() = nb::none(), nb::arg("indices").none() = nb::none(),
          nb::arg("topk_length").none() = nb::none())
      .def(
          "graph_shape",
          [](const mlakit::MlaStep& self, nb::handle query_lens, nb::handle context_lens, int topk) {
            const std::vector<int32_t> q = host_indptr(query_lens, "query_lens");
            const std::vector<int32_t> ctx = host_indptr(context_lens, "context_lens");
            if (ctx.size() != q.size())
              throw Error(ErrorKind::kInvalidArgument, "context_lens",
                          "has " + std::to_string(ctx.size()) + " entries but query_lens has " + std::to_string(q.size()));
            for (size_t i = 0; i < q.size(); ++i) {
              if (q[i] < 0 || ctx[i] < 0)
                throw Error(ErrorKind::kInvalidArgument, q[i] < 0 ? "query_lens" : "context_lens",
                            "entry " + std::to_string(i) + " is negative");
            }
            mlakit::MlaBatch b;
            b.batch_size = static_cast<int>(q.size());
            b.query_lens = q.data();
            b.context_lens = ctx.data();
            return nb::make_tuple(self.absorbed_tokens(b, topk), self.gathered_rows(b, topk));
          },
          nb::arg("query_lens").none(), nb::arg("context_lens").none(), nb::arg("topk") = 0)
      .def_prop_ro("absorb_max_query_len", [](const mlakit::MlaStep& s) { return s.info().absorb_max_query_len; })
      .def_prop_ro("planned", &mlakit::MlaStep::planned)
      .def("info", &mlakit::MlaStep::info)
      .def_prop_ro("num_heads", [](const mlakit::MlaStep& s) { return s.config().num_heads; })
      .def_prop_ro("kv_lora_rank", [](const mlakit::MlaStep& s) { return s.config().kv_lora_rank; })
      .def_prop_ro("qk_nope_head_dim", [](const mlakit::MlaStep& s) { return s.config().qk_nope_head_dim; })
      .def_prop_ro("qk_rope_head_dim", [](const mlakit::MlaStep& s) { return s.config().qk_rope_head_dim; })
      .def_prop_ro("v_head_dim", [](const mlakit::MlaStep& s) { return s.config().v_head_dim; })
      .def_prop_ro("block_size", [](const mlakit::MlaStep& s) { return s.config().block_size; })
      .def_prop_ro("num_blocks", [](const mlakit::MlaStep& s) { return s.config().num_blocks; })
      .def_prop_ro("dtype", [](const mlakit::MlaStep& s) { return std::string(mlakit::dtype_name(s.config().dtype)); })
      .def_prop_ro("device", [](const mlakit::MlaStep& s) { return mlakit::to_string(s.config().device); })
      .def_prop_ro("fp8_attention", [](const mlakit::MlaStep& s) { return s.config().fp8_attention; })
      .def_prop_ro("kv_cache_dtype",
                   [](const mlakit::MlaStep& s) { return std::string(mlakit::kv_cache_dtype_name(s.config().kv_cache_dtype)); })
      .def_static(
          "workspace_sizes",
          [](int num_heads, int kv_lora_rank, int qk_nope_head_dim, int qk_rope_head_dim, int v_head_dim,
             const std::string& dtype, int block_size, int64_t num_blocks, int max_batch, int64_t max_tokens,
             int64_t max_context_tokens, int64_t workspace_rows, const std::string& device, bool fp8_attention,
             const std::string& kv_cache_dtype, int absorb_max_query_len, int64_t max_absorbed_tokens, int max_topk,
             int64_t max_decoded_rows) {
            mlakit::WorkspaceSizes w = mlakit::MlaStep::workspace_sizes(make_config(
                num_heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, dtype, block_size,
                num_blocks, max_batch, max_tokens, max_context_tokens, workspace_rows, device, false, fp8_attention,
                kv_cache_dtype, absorb_max_query_len, max_absorbed_tokens, max_topk, max_decoded_rows));
            return nb::make_tuple(w.host_bytes, w.device_bytes);
          },
          nb::arg("num_heads"), nb::arg("kv_lora_rank"), nb::arg("qk_nope_head_dim"), nb::arg("qk_rope_head_dim"),
          nb::arg("v_head_dim"), nb::arg("dtype"), nb::arg("block_size"), nb::arg("num_blocks"),
          nb::arg("max_batch"), nb::arg("max_tokens"), nb::arg("max_context_tokens"), nb::arg("workspace_rows"),
          nb::arg("device"), nb::arg("fp8_attention") = false, nb::arg("kv_cache_dtype") = "auto",
          nb::arg("absorb_max_query_len") = -1, nb::arg("max_absorbed_tokens") = 0, nb::arg("max_topk") = 0,
          nb::arg("max_decoded_rows") = 0);
  m.def("graph_rows_bucket", &mlakit::graph_rows_bucket, nb::arg("rows"), nb::arg("cap"),
        nb::arg("step_above") = 256,
        "The MlaStep.plan(graph_rows=...) bucket of a step of `rows` rows (context + new tokens) under "
        "a workspace of `cap` rows: multiples of 256 up to 1024 rows, then of step_above, never above cap.");
}

}  // namespace mlakit_py

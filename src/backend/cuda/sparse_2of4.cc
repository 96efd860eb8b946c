#include "backend/cuda/sparse_2of4.h"

#include <dlfcn.h>
#include <library_types.h>

#include <mutex>
#include <type_traits>

#include "common/log.h"

namespace pagoda::cuda {

namespace {

// cuSPARSELt's C ABI (cusparseLt.h, versions 0.6+). Its opaque structs are 512 bytes in 0.10 and at
// most 1024 in earlier releases: ours are larger, so any version fits.
struct alignas(16) Opaque {
  uint8_t data[SparseLt::kOpaqueBytes];
};
using Status_t = int;  // cusparseStatus_t: 0 success
constexpr int kOrderCol = 1;        // CUSPARSE_ORDER_COL
constexpr int kOpNone = 0;          // CUSPARSE_OPERATION_NON_TRANSPOSE
constexpr int kOpTranspose = 1;     // CUSPARSE_OPERATION_TRANSPOSE
constexpr int kSparsity50 = 0;      // CUSPARSELT_SPARSITY_50_PERCENT
constexpr int kCompute32F = 2;      // CUSPARSE_COMPUTE_32F (0.6+)
constexpr int kAlgDefault = 0;      // CUSPARSELT_MATMUL_ALG_DEFAULT
constexpr uint32_t kAlignment = 16;

}  // namespace

struct SparseLt::Api {
  void* lib = nullptr;
  Status_t (*init)(void* handle) = nullptr;
  Status_t (*destroy)(const void* handle) = nullptr;
  Status_t (*get_property)(int type, int* value) = nullptr;
  const char* (*error_string)(Status_t) = nullptr;  // optional
  Status_t (*dense_init)(const void* h, void* mat, int64_t rows, int64_t cols, int64_t ld, uint32_t align,
                         cudaDataType type, int order) = nullptr;
  Status_t (*structured_init)(const void* h, void* mat, int64_t rows, int64_t cols, int64_t ld, uint32_t align,
                              cudaDataType type, int order, int sparsity) = nullptr;
  Status_t (*mat_destroy)(const void* mat) = nullptr;
  Status_t (*matmul_init)(const void* h, void* desc, int op_a, int op_b, const void* a, const void* b, const void* c,
                          const void* d, int compute) = nullptr;
  Status_t (*alg_init)(const void* h, void* alg, const void* desc, int alg_id) = nullptr;
  Status_t (*alg_destroy)(const void* alg) = nullptr;  // optional (0.6+)
  Status_t (*plan_init)(const void* h, void* plan, const void* desc, const void* alg) = nullptr;
  Status_t (*plan_destroy)(const void* plan) = nullptr;
  Status_t (*workspace)(const void* h, const void* plan, size_t* bytes) = nullptr;
  Status_t (*matmul)(const void* h, const void* plan, const void* alpha, const void* a, const void* b, const void* beta,
                     const void* c, void* d, void* workspace, cudaStream_t* streams, int32_t num_streams) = nullptr;
  Status_t (*prune_check2)(const void* h, const void* mat, int is_sparse_a, int op, const void* in, int* d_valid,
                           cudaStream_t s) = nullptr;
  Status_t (*compressed_size2)(const void* h, const void* mat, size_t* size, size_t* buffer) = nullptr;
  Status_t (*compress2)(const void* h, const void* mat, int is_sparse_a, int op, const void* dense, void* out,
                        void* buffer, cudaStream_t s) = nullptr;

  std::string error(Status_t s) const {
    if (error_string != nullptr) return std::string(error_string(s)) + " (" + std::to_string(s) + ")";
    return "status " + std::to_string(s);
  }
};

// The structured weight's descriptor (independent of M) and one matmul's descriptors and plan.
struct SparseLt::Plan {
  Opaque a, b, d, desc, alg, plan;
  bool has_a = false, has_b = false, has_d = false, has_alg = false, has_plan = false;
  const Api* api = nullptr;
  ~Plan() {
    if (api == nullptr) return;
    if (has_plan) api->plan_destroy(&plan);
    if (has_alg && api->alg_destroy != nullptr) api->alg_destroy(&alg);
    if (has_a) api->mat_destroy(&a);
    if (has_b) api->mat_destroy(&b);
    if (has_d) api->mat_destroy(&d);
  }
};

namespace {

#define PAGODA_SPARSE_CALL(api, expr, what)                                                     \
  do {                                                                                        \
    const Status_t pagoda_sparse_status_ = (expr);                                            \
    if (pagoda_sparse_status_ != 0)                                                           \
      return make_status(StatusCode::kInternal, "cuSPARSELt {}: {}", what, (api)->error(pagoda_sparse_status_)); \
  } while (0)

// The process's library, loaded once; an error says why it is unavailable.
Result<const SparseLt::Api*> load_api() {
  static std::once_flag once;
  static SparseLt::Api api;
  static std::string failure;
  std::call_once(once, [] {
    void* lib = dlopen("libcusparseLt.so.0", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      failure = fmt::format("cuSPARSELt is not available ({}): install the pip package nvidia-cusparselt-cu13 and "
                            "put its lib folder on LD_LIBRARY_PATH", why != nullptr ? why : "dlopen failed");
      return;
    }
    auto sym = [&](auto& fn, const char* name, bool required) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (fn == nullptr && required && failure.empty())
        failure = fmt::format("cuSPARSELt lacks {} (versions 0.6 and later have it)", name);
    };
    sym(api.init, "cusparseLtInit", true);
    sym(api.destroy, "cusparseLtDestroy", true);
    sym(api.get_property, "cusparseLtGetProperty", true);
    sym(api.error_string, "cusparseLtGetErrorString", false);
    sym(api.dense_init, "cusparseLtDenseDescriptorInit", true);
    sym(api.structured_init, "cusparseLtStructuredDescriptorInit", true);
    sym(api.mat_destroy, "cusparseLtMatDescriptorDestroy", true);
    sym(api.matmul_init, "cusparseLtMatmulDescriptorInit", true);
    sym(api.alg_init, "cusparseLtMatmulAlgSelectionInit", true);
    sym(api.alg_destroy, "cusparseLtMatmulAlgSelectionDestroy", false);
    sym(api.plan_init, "cusparseLtMatmulPlanInit", true);
    sym(api.plan_destroy, "cusparseLtMatmulPlanDestroy", true);
    sym(api.workspace, "cusparseLtMatmulGetWorkspace", true);
    sym(api.matmul, "cusparseLtMatmul", true);
    sym(api.prune_check2, "cusparseLtSpMMAPruneCheck2", true);
    sym(api.compressed_size2, "cusparseLtSpMMACompressedSize2", true);
    sym(api.compress2, "cusparseLtSpMMACompress2", true);
    if (failure.empty()) {
      api.lib = lib;
    } else {
      dlclose(lib);
    }
  });
  if (!failure.empty()) return unimplemented("{}", failure);
  return &api;
}

}  // namespace

Result<std::unique_ptr<SparseLt>> SparseLt::create(size_t workspace_bytes) {
  PAGODA_ASSIGN_OR_RETURN(const Api* api, load_api());
  std::unique_ptr<SparseLt> s(new SparseLt());
  s->api_ = api;
  for (int i = 0; i < 3; ++i)
    PAGODA_SPARSE_CALL(api, api->get_property(i, &s->version_[i]), "version");  // MAJOR, MINOR, PATCH
  if (s->version_[0] == 0 && s->version_[1] < 6)
    return unimplemented("cuSPARSELt {} is too old: its ABI before 0.6 differs; install 0.6 or later", s->version());
  int dev = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major < 8) return unimplemented("2:4 sparse tensor cores need compute capability 8.0 or later (this device: {})", major);
  s->handle_ = std::make_unique<Handle>();
  PAGODA_SPARSE_CALL(api, api->init(s->handle_.get()), "init");
  s->workspace_.reset(workspace_bytes);
  return s;
}

SparseLt::~SparseLt() {
  plans_.clear();
  if (api_ != nullptr && handle_ != nullptr) api_->destroy(handle_.get());
}

std::string SparseLt::version() const { return fmt::format("{}.{}.{}", version_[0], version_[1], version_[2]); }

// The structured descriptor of an [n, k] row-major weight (K x N column-major, used transposed)
// into p.a, which then owns it.
Status SparseLt::weight_descriptor(int64_t n, int64_t k, Plan& p) const {
  p.api = api_;
  PAGODA_SPARSE_CALL(api_, api_->structured_init(handle_.get(), &p.a, k, n, k, kAlignment, CUDA_R_16BF, kOrderCol,
                                                 kSparsity50),
                     "structured descriptor");
  p.has_a = true;
  return {};
}

Result<bool> SparseLt::holds_2of4(const void* w, int64_t n, int64_t k, cudaStream_t s) {
  if (!shape_supported(n, k)) return false;
  Plan p;
  PAGODA_RETURN_IF_ERROR(weight_descriptor(n, k, p));
  DeviceBuffer flag(sizeof(int));
  CUDA_CHECK(cudaMemsetAsync(flag.get(), 0, sizeof(int), s));
  PAGODA_SPARSE_CALL(api_, api_->prune_check2(handle_.get(), &p.a, 1, kOpTranspose, w, flag.as<int>(), s), "prune check");
  int invalid = 1;
  CUDA_CHECK(cudaMemcpyAsync(&invalid, flag.get(), sizeof(int), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  return invalid == 0;  // 0: every group of 4 holds at most 2 nonzeros
}

Result<int64_t> SparseLt::compressed_bytes(int64_t n, int64_t k) {
  Plan p;
  PAGODA_RETURN_IF_ERROR(weight_descriptor(n, k, p));
  size_t size = 0, buffer = 0;
  PAGODA_SPARSE_CALL(api_, api_->compressed_size2(handle_.get(), &p.a, &size, &buffer), "compressed size");
  return static_cast<int64_t>(size);
}

bool SparseLt::available(std::string* why) {
  auto api = load_api();
  if (!api.ok() && why != nullptr) *why = api.status().message();
  return api.ok();
}

Status SparseLt::compress(const void* w, int64_t n, int64_t k, Sparse2of4Weight& out, cudaStream_t s) {
  if (!shape_supported(n, k)) return invalid_argument("a 2:4 weight needs N and K multiples of 16, got [{}, {}]", n, k);
  Plan p;
  PAGODA_RETURN_IF_ERROR(weight_descriptor(n, k, p));
  size_t size = 0, buffer_bytes = 0;
  PAGODA_SPARSE_CALL(api_, api_->compressed_size2(handle_.get(), &p.a, &size, &buffer_bytes), "compressed size");
  out.n = n;
  out.k = k;
  out.compressed.reset(size);
  DeviceBuffer buffer(buffer_bytes);
  PAGODA_SPARSE_CALL(api_, api_->compress2(handle_.get(), &p.a, 1, kOpTranspose, w, out.compressed.get(), buffer.get(), s),
                     "compress");
  CUDA_CHECK(cudaStreamSynchronize(s));
  return {};
}

Result<SparseLt::Plan*> SparseLt::plan_for(int64_t n, int64_t k, int64_t M) {
  auto key = std::make_tuple(n, k, M);
  if (auto it = plans_.find(key); it != plans_.end()) return it->second.get();
  auto p = std::make_unique<Plan>();
  PAGODA_RETURN_IF_ERROR(weight_descriptor(n, k, *p));
  const void* h = handle_.get();
  PAGODA_SPARSE_CALL(api_, api_->dense_init(h, &p->b, k, M, k, kAlignment, CUDA_R_16BF, kOrderCol), "activation descriptor");
  p->has_b = true;
  PAGODA_SPARSE_CALL(api_, api_->dense_init(h, &p->d, n, M, n, kAlignment, CUDA_R_16BF, kOrderCol), "output descriptor");
  p->has_d = true;
  PAGODA_SPARSE_CALL(api_, api_->matmul_init(h, &p->desc, kOpTranspose, kOpNone, &p->a, &p->b, &p->d, &p->d, kCompute32F),
                     fmt::format("matmul descriptor (N {} K {} M {})", n, k, M));
  PAGODA_SPARSE_CALL(api_, api_->alg_init(h, &p->alg, &p->desc, kAlgDefault), "algorithm selection");
  p->has_alg = true;
  PAGODA_SPARSE_CALL(api_, api_->plan_init(h, &p->plan, &p->desc, &p->alg), "plan");
  p->has_plan = true;
  size_t ws = 0;
  PAGODA_SPARSE_CALL(api_, api_->workspace(h, &p->plan, &ws), "workspace size");
  if (ws > workspace_.bytes())
    return resource_exhausted("cuSPARSELt's plan for N {} K {} M {} needs {} bytes of workspace, {} are reserved", n, k,
                              M, ws, workspace_.bytes());
  Plan* raw = p.get();
  plans_.emplace(key, std::move(p));
  return raw;
}

Status SparseLt::matmul(const void* x, const Sparse2of4Weight& w, int64_t M, void* y, cudaStream_t s) {
  if (M <= 0 || M % kSparseRowAlign != 0)
    return invalid_argument("the sparse matmul takes a positive multiple of {} rows, got {}", kSparseRowAlign, M);
  PAGODA_ASSIGN_OR_RETURN(Plan * p, plan_for(w.n, w.k, M));
  const float alpha = 1.0f, beta = 0.0f;
  cudaStream_t streams[1] = {s};
  PAGODA_SPARSE_CALL(api_, api_->matmul(handle_.get(), &p->plan, &alpha, w.compressed.get(), x, &beta, y, y,
                                        workspace_.get(), streams, 1),
                     "matmul");
  return {};
}

}  // namespace pagoda::cuda

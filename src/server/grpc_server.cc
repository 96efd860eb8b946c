#include "server/grpc_server.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include <fmt/format.h>

#include "pagoda.grpc.pb.h"
#include "server/http_request_rules.h"

namespace pagoda::server {
namespace {

grpc::Status to_grpc(const api::ApiError& e) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  if (e.status == 400) code = grpc::StatusCode::INVALID_ARGUMENT;
  else if (e.status == 401) code = grpc::StatusCode::UNAUTHENTICATED;
  else if (e.status == 404) code = grpc::StatusCode::NOT_FOUND;
  else if (e.status == 429) code = grpc::StatusCode::RESOURCE_EXHAUSTED;
  else if (e.status == 503) code = grpc::StatusCode::UNAVAILABLE;
  return grpc::Status(code, e.message);
}

grpc::Status to_grpc(const Status& st) {
  switch (st.code()) {
    case StatusCode::kInvalidArgument: return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, st.message());
    case StatusCode::kOutOfRange: return grpc::Status(grpc::StatusCode::OUT_OF_RANGE, st.message());
    case StatusCode::kResourceExhausted: return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, st.message());
    case StatusCode::kCancelled: return grpc::Status(grpc::StatusCode::UNAVAILABLE, st.message());
    case StatusCode::kUnimplemented: return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, st.message());
    default: return grpc::Status(grpc::StatusCode::INTERNAL, st.message());
  }
}

std::string metadata(const grpc::ServerContext* context, const char* key) {
  auto it = context->client_metadata().find(key);
  if (it == context->client_metadata().end()) return {};
  return std::string(it->second.data(), it->second.size());
}

class Service final : public pagoda::v1::Pagoda::Service {
 public:
  explicit Service(ServingContext& ctx) : ctx_(ctx) {}

  grpc::Status Health(grpc::ServerContext*, const pagoda::v1::HealthRequest*, pagoda::v1::HealthResponse* resp) override {
    resp->set_status(ctx_.draining() ? pagoda::v1::HealthResponse::DRAINING : pagoda::v1::HealthResponse::SERVING);
    resp->set_model(ctx_.model_name());
    return grpc::Status::OK;
  }

  grpc::Status Tokenize(grpc::ServerContext* context, const pagoda::v1::TokenizeRequest* req,
                        pagoda::v1::TokenizeResponse* resp) override {
    if (auto e = ctx_.check_auth(metadata(context, "authorization"))) return to_grpc(*e);
    for (int32_t id : ctx_.engine().tokenize(req->text(), req->add_special_tokens())) resp->add_token_ids(id);
    return grpc::Status::OK;
  }

  grpc::Status Generate(grpc::ServerContext* context, const pagoda::v1::GenerateRequest* req,
                        grpc::ServerWriter<pagoda::v1::GenerateResponse>* writer) override {
    const std::string auth = metadata(context, "authorization");
    if (auto e = ctx_.check_auth(auth)) return to_grpc(*e);
    Engine& engine = ctx_.engine();
    GenerateRequest g;
    g.prompt_ids.assign(req->prompt_ids().begin(), req->prompt_ids().end());
    if (g.prompt_ids.empty() && req->prompt().empty())
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the prompt is empty (set prompt or prompt_ids)");
    if (g.prompt_ids.empty()) g.prompt_ids = engine.tokenize(req->prompt(), true);
    if (req->max_tokens() < 0) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "max_tokens must be >= 0");
    g.stop.max_tokens = req->max_tokens() > 0 ? req->max_tokens() : -1;
    if (req->has_temperature()) g.sampling.temperature = req->temperature();
    if (req->has_top_p()) g.sampling.top_p = req->top_p();
    g.sampling.top_k = req->top_k() < 0 ? 0 : req->top_k();
    if (req->has_min_p()) g.sampling.min_p = req->min_p();
    if (req->has_seed()) g.sampling.seed = req->seed();
    if (req->has_repetition_penalty()) g.sampling.repetition_penalty = req->repetition_penalty();
    g.sampling.presence_penalty = req->presence_penalty();
    g.sampling.frequency_penalty = req->frequency_penalty();
    if (req->stop_size() > api::kMaxStopStrings)
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          fmt::format("more than {} stop strings ({})", api::kMaxStopStrings, req->stop_size()));
    g.stop.stop.assign(req->stop().begin(), req->stop().end());
    if (auto err = api::check_stop_strings(g.stop.stop)) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, *err);
    g.stop.ignore_eos = req->ignore_eos();
    g.stop.min_tokens = req->min_tokens();
    g.priority = req->priority();
    g.request_id = ctx_.make_id("grpc");
    const int64_t plen = static_cast<int64_t>(g.prompt_ids.size());
    const int64_t charge = plen + (g.stop.max_tokens > 0 ? g.stop.max_tokens : std::max<int64_t>(0, engine.max_model_len() - plen));
    auto admitted = ctx_.admit(ctx_.caller_key(auth, peer_host(context->peer())), charge, 1);
    if (auto* e = std::get_if<api::ApiError>(&admitted)) return to_grpc(*e);
    auto ticket = std::move(std::get<std::unique_ptr<ServingContext::Ticket>>(admitted));
    auto stream = engine.submit(std::move(g));
    if (!stream.ok()) return to_grpc(stream.status());
    const std::string id = (*stream)->id();
    ctx_.track(id);
    SequenceTimings timings;
    int32_t completion = 0, prompt = 0;
    grpc::Status result = grpc::Status::OK;
    bool finished = false;
    while (!finished) {
      if (context->IsCancelled()) {
        engine.cancel(id);
        timings.finish_reason = "abort";
        result = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
        break;
      }
      auto out = (*stream)->next_for(std::chrono::milliseconds(50));
      if (!out) {
        if ((*stream)->done()) break;
        continue;
      }
      pagoda::v1::GenerateResponse resp;
      resp.set_text(out->text);
      for (const auto& t : out->tokens) resp.add_token_ids(t.token);
      resp.set_finished(out->finished);
      resp.set_finish_reason(out->finish_reason);
      resp.set_prompt_tokens(out->num_prompt_tokens);
      resp.set_completion_tokens(out->num_output_tokens);
      prompt = out->num_prompt_tokens;
      completion = out->num_output_tokens;
      timings.arrival = out->arrival_time;
      timings.first_scheduled = out->first_scheduled_time;
      timings.first_token = out->first_token_time;
      if (!out->tokens.empty()) timings.token_times.push_back(out->time);
      if (out->finished) {
        finished = true;
        timings.finished = out->time;
        timings.finish_reason = out->finish_reason;
        if (out->finish_reason == "error") result = grpc::Status(grpc::StatusCode::INTERNAL, out->error);
      }
      if (!writer->Write(resp)) {
        if (!finished) {
          engine.cancel(id);
          timings.finish_reason = "abort";
          result = grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
        }
        break;
      }
    }
    if (timings.finished == 0) timings.finished = timings.token_times.empty() ? timings.arrival : timings.token_times.back();
    if (timings.finish_reason.empty()) timings.finish_reason = "abort";
    ctx_.metrics().record_sequence(timings);
    ticket->set_used_tokens(prompt + completion);
    ctx_.untrack(id);
    return result;
  }

 private:
  ServingContext& ctx_;
};

}  // namespace

struct GrpcServer::Impl {
  explicit Impl(ServingContext& ctx) : service(ctx) {}
  Service service;
  std::unique_ptr<grpc::Server> server;
};

GrpcServer::GrpcServer(ServingContext& ctx) : impl_(std::make_unique<Impl>(ctx)) {}
GrpcServer::~GrpcServer() { shutdown(0); }

Status GrpcServer::start(const std::string& host, int port) {
  grpc::ServerBuilder builder;
  const std::string addr = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  builder.AddListeningPort(addr, grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(&impl_->service);
  impl_->server = builder.BuildAndStart();
  if (!impl_->server || port_ == 0) {
    impl_->server.reset();
    return make_status(StatusCode::kIoError, "cannot listen for gRPC on {} (port in use?)", addr);
  }
  return Status();
}

void GrpcServer::shutdown(double deadline_s) {
  if (!impl_->server) return;
  impl_->server->Shutdown(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(deadline_s * 1000)));
  impl_->server->Wait();
  impl_->server.reset();
}

}  // namespace pagoda::server

#include "phub/metrics/http_exporter.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "absl/strings/str_cat.h"
#include "phub/transport/socket_listener.h"
#include "spdlog/spdlog.h"

namespace phub::metrics {

namespace beast = boost::beast;
namespace http = boost::beast::http;

// One connection: read one request (bounded in size and time), write one answer, close.
class HttpExporter::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(boost::asio::ip::tcp::socket socket, HttpExporter& owner, std::uint64_t id)
      : stream_(std::move(socket)),
        owner_(&owner),
        id_(id),
        buffer_(owner.options_.max_header_bytes) {
    parser_.header_limit(owner.options_.max_header_bytes);
    parser_.body_limit(0);  // a scrape has no body; one that claims one is refused
  }

  void Begin() {
    stream_.expires_after(std::chrono::milliseconds(owner_->options_.request_timeout_ms));
    http::async_read(stream_, buffer_, parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       self->OnRead(ec);
                     });
  }

  // The exporter is going: handlers still queued must not touch it (nor its registry).
  void Detach() {
    owner_ = nullptr;
    Close();
  }

 private:
  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  void OnRead(beast::error_code ec) {
    if (owner_ == nullptr) return;
    if (ec == http::error::header_limit || ec == http::error::body_limit ||
        ec == http::error::buffer_overflow) {
      return Answer(http::status::request_header_fields_too_large,
                    absl::StrCat("request refused: headers over ", owner_->options_.max_header_bytes,
                                 " bytes, or a body (a scrape is a GET without one)\n"));
    }
    if (ec) {
      // Timed out, closed or not HTTP: nothing worth answering.
      spdlog::debug("metrics: connection from {} ended: {}", Peer(), ec.message());
      return Finish();
    }
    const auto& request = parser_.get();
    if (request.method() != http::verb::get && request.method() != http::verb::head) {
      return Answer(http::status::method_not_allowed, "only GET is served here\n");
    }
    const beast::string_view target = request.target();
    const beast::string_view path = target.substr(0, target.find('?'));
    if (path == "/metrics") {
      return Answer(http::status::ok, owner_->registry_.Render(),
                    "text/plain; version=0.0.4; charset=utf-8",
                    request.method() == http::verb::head);
    }
    if (path == "/") return Answer(http::status::ok, "phubd: metrics are at /metrics\n");
    Answer(http::status::not_found, "not found: metrics are at /metrics\n");
  }

  void Answer(http::status status, std::string body,
              const char* type = "text/plain; charset=utf-8", bool head_only = false) {
    response_.result(status);
    response_.version(11);
    response_.set(http::field::server, "phubd");
    response_.set(http::field::content_type, type);
    response_.keep_alive(false);
    response_.body() = std::move(body);
    response_.prepare_payload();
    if (head_only) response_.body().clear();
    http::async_write(stream_, response_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        if (ec) spdlog::debug("metrics: answer to {} not sent: {}", self->Peer(),
                                              ec.message());
                        self->Finish();
                      });
  }

  void Finish() {
    Close();
    if (owner_ != nullptr) {
      owner_->pending_.Done(id_);
      owner_->sessions_.erase(id_);
    }
  }

  std::string Peer() {
    beast::error_code ec;
    auto endpoint = stream_.socket().remote_endpoint(ec);
    return ec ? std::string("?") : absl::StrCat(endpoint.address().to_string(), ":", endpoint.port());
  }

  beast::tcp_stream stream_;
  HttpExporter* owner_;  // null once the exporter stopped
  std::uint64_t id_;
  beast::flat_buffer buffer_;
  http::request_parser<http::empty_body> parser_;
  http::response<http::string_body> response_;
};

HttpExporter::HttpExporter(const Registry& registry, const ExporterOptions& options)
    : registry_(registry),
      options_(options),
      pending_({.per_source = options.max_per_source, .total = options.max_connections}) {}

HttpExporter::~HttpExporter() { Stop(); }

StatusOr<std::unique_ptr<HttpExporter>> HttpExporter::Start(boost::asio::io_context& context,
                                                            const Registry& registry,
                                                            const ExporterOptions& options) {
  std::unique_ptr<HttpExporter> exporter(new HttpExporter(registry, options));
  auto listener = transport::SocketListener::Bind(context, options.address, options.port);
  if (!listener.ok()) {
    return absl::Status(listener.status().code(),
                        absl::StrCat("metrics endpoint: ", listener.status().message(),
                                     " (change --metrics-port or --metrics-address)"));
  }
  exporter->listener_ = std::move(*listener);
  HttpExporter* self = exporter.get();
  self->listener_->Start([self](boost::asio::ip::tcp::socket socket) {
    boost::system::error_code ec;
    const auto peer = socket.remote_endpoint(ec);
    const std::string source = ec ? std::string("unknown") : peer.address().to_string();
    const std::uint64_t id = self->next_id_++;
    const PendingConnections::Admission admission = self->pending_.Admit(source, id);
    if (!admission.admitted) {
      if (self->refused_++ % 100 == 0) {
        spdlog::warn("metrics: {} connection(s) closed at accept: their address already had {} "
                     "being served",
                     self->refused_, self->options_.max_per_source);
      }
      socket.close(ec);
      return;
    }
    if (admission.evict) {
      if (self->evicted_++ % 100 == 0) {
        spdlog::warn("metrics: {} connection(s) closed for newer ones: {} were being served",
                     self->evicted_, self->options_.max_connections);
      }
      if (auto it = self->sessions_.find(*admission.evict); it != self->sessions_.end()) {
        auto evicted = it->second;
        self->sessions_.erase(it);
        evicted->Detach();
      }
    }
    auto session = std::make_shared<Session>(std::move(socket), *self, id);
    self->sessions_.emplace(id, session);
    session->Begin();
  });
  return exporter;
}

std::uint16_t HttpExporter::port() const { return listener_ ? listener_->port() : 0; }

void HttpExporter::Stop() {
  if (listener_) listener_->Stop();
  // Their pending operations complete with an error and find no owner.
  for (const auto& [id, session] : sessions_) session->Detach();
  sessions_.clear();
}

}  // namespace phub::metrics

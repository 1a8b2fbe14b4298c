#include "phub/server/job/control_session.h"

#include <boost/asio/write.hpp>

#include "phub/transport/control_channel.h"

namespace phub::server {

namespace asio = boost::asio;

namespace {
void WriteQueued(const SessionPtr& session) {
  if (session->outbox.empty()) {
    session->writing = false;
    if (session->close_when_flushed) CloseSessionSocket(*session);
    return;
  }
  session->writing = true;
  std::shared_ptr<std::string> framed = session->outbox.front();
  asio::async_write(session->socket, asio::buffer(*framed),
                    [session, framed](const boost::system::error_code& ec, std::size_t) {
                      session->outbox.pop_front();
                      if (ec) {  // the read side reports the peer's end; just stop writing
                        session->outbox.clear();
                        session->writing = false;
                        return CloseSessionSocket(*session);
                      }
                      WriteQueued(session);
                    });
}
}  // namespace

void SendControl(const SessionPtr& session, const proto::ControlMessage& message) {
  if (!session->socket.is_open()) return;
  session->outbox.push_back(transport::FrameControlMessage(message));
  if (!session->writing) WriteQueued(session);
}

void CloseSessionSocket(Session& session) {
  boost::system::error_code ignored;
  session.socket.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  session.socket.close(ignored);
}

}  // namespace phub::server

import HTTPTypes
import Hummingbird
import HummingbirdAuth
import MediaCore

/// Who a request acts as, once a route group's authenticator has accepted its credentials.
public struct APIIdentity: Sendable, Equatable {
    public enum Scheme: String, Sendable {
        /// A Stream Manager 2.0 JWT from `PUT /as/v1/auth/login`.
        case bearerToken
        /// Stream Manager 1.0's shared `accessToken` query parameter.
        case streamManager1AccessToken
    }

    public var subject: String
    public var scheme: Scheme
}

/// The admin API's bearer tokens (Stream Manager 2.0): a route group with this middleware is
/// reached only with a valid token. A refusal is the API's usual error body with a
/// `WWW-Authenticate` challenge, and says why (missing, malformed, wrong algorithm, forged,
/// expired); it stops the request here, so a handler never runs unauthenticated.
struct BearerTokenAuthenticator: AuthenticatorMiddleware {
    typealias Context = NodeRequestContext
    let plane: ControlPlane

    func authenticate(request: Request, context: Context) async throws -> APIIdentity? {
        // The scheme name is case-insensitive (RFC 9110 §11.1); hummingbird-auth's `bearer` wants "Bearer ".
        guard let header = request.headers[.authorization], header.lowercased().hasPrefix("bearer ") else {
            throw HTTPError(.unauthorized, headers: [.wwwAuthenticate: "Bearer"],
                            message: "missing bearer token: log in with PUT /as/v1/auth/login and send Authorization: Bearer <token>")
        }
        let token = header.dropFirst("bearer ".count).trimmingCharacters(in: .whitespaces)
        switch plane.tokens.verify(token) {
        case let .success(subject):
            return APIIdentity(subject: subject, scheme: .bearerToken)
        case let .failure(refusal):
            plane.refusals.log(plane.logger, "request refused: \(refusal.reason)", kind: "bearer", metadata: ["path": "\(request.uri.path.prefix(256))", "http.address": "\(context.clientAddress)"])
            throw HTTPError(.unauthorized, headers: [.wwwAuthenticate: "Bearer error=\"invalid_token\""], message: refusal.reason)
        }
    }
}

/// Stream Manager 1.0's meta API: `?accessToken=` must match `ABR_WORKER_SM1_ACCESS_TOKEN`,
/// compared in constant time. Without that setting the API is off (404 that says how to turn it on).
struct StreamManager1AccessTokenAuthenticator: AuthenticatorMiddleware {
    typealias Context = NodeRequestContext
    let plane: ControlPlane

    func authenticate(request: Request, context: Context) async throws -> APIIdentity? {
        guard let expected = plane.configuration.sm1AccessToken else { throw HTTPAPI.streamManager1Off }
        let address = context.clientAddress
        if let wait = plane.accessTokenThrottle.retryAfter(address, now: plane.configuration.clock.seconds) {
            throw HTTPError(.tooManyRequests, headers: [.retryAfter: "\(wait)"],
                            message: "too many wrong accessTokens from \(address); try again in \(wait) s")
        }
        guard let given = request.uri.queryParameters.get("accessToken"), constantTimeEqual(given, expected) else {
            plane.accessTokenThrottle.record(address, now: plane.configuration.clock.seconds)
            plane.refusals.log(plane.logger, "request refused: missing or wrong accessToken", kind: "accessToken",
                               metadata: ["path": "\(request.uri.path.prefix(256))", "http.address": "\(address)"])
            throw HTTPError(.unauthorized, message: "missing or wrong accessToken")
        }
        return APIIdentity(subject: "stream-manager-1", scheme: .streamManager1AccessToken)
    }
}

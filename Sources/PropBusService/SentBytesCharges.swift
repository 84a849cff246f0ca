import DBus
import Dispatch
import PropBus

/// What the daemon sends because of a caller is charged to it (``ReplyBytesQuota``): its
/// replies, and the signals its calls cause (a write's `PropertiesChanged`, an execution's
/// `Finished`). Past its quota its replies are refused, and so are its calls that would write
/// or start something, before they cause more.
///
/// Owned by the service, confined like it to its queue.
struct SentBytesCharges {
    /// The bytes charged to each principal in the window.
    private(set) var quota: ReplyBytesQuota
    /// Who is checked, and so who is charged (and who is exempt).
    let access: AccessPolicy

    /// Methods that act without being writes the tree knows of (``MethodDescription/writes``):
    /// refused before they act when their caller is past its quota, and their replies, small
    /// and saying the act happened, never refused once it did. `Execute` is not one: its reply
    /// is the execution's result, as large as `--max-value-size`, and charged like a read's.
    static let actingMethods: Set<String> = ["Start", "Cancel", "Reload", "RegisterHandler", "UnregisterHandler"]

    /// Who pays for what is sent to or because of a caller: its uid where callers are checked
    /// (root and the daemon's user pay nothing), the connection where they are not (no uid is
    /// known; a connection that never reads must not stall the bus for the others either).
    func principal(of sender: String?, uid: UInt32?) -> ReplyBytesQuota.Principal? {
        guard access.isEnabled else { return sender.flatMap { $0.isEmpty ? nil : .connection($0) } }
        guard let uid, uid != 0, uid != access.daemonUserID else { return nil }
        return .uid(uid)
    }

    private static var now: UInt64 { DispatchTime.now().uptimeNanoseconds }

    /// Charges a reply to its caller; the refusal to send instead when the quota is spent.
    mutating func admitReply(to call: Message, of size: Int, caller: Credentials?) -> DBusError? {
        guard !Self.actingMethods.contains(call.member ?? ""), let principal = principal(of: call.sender, uid: caller?.userID),
              let used = quota.charge(size, to: principal, now: Self.now) else { return nil }
        guard call.member == "Execute" else { return quota.refusal(size: size, principal: principal, used: used) }
        return PropBusError(.limitsExceeded, "the execution finished, but its result of \(size) bytes is not sent: \(principal) was sent \(used) bytes of replies and of signals its calls caused in the last \(ReplyBytesQuota.windowNanoseconds / 1_000_000_000) s, and the reply quota is \(quota.limit) bytes (--max-reply-bytes-per-uid); the result went out in the command's Finished signal").dbusError
    }

    /// Calls that end what a caller holds: never refused, a caller past its quota may still
    /// give back.
    static let releasingMethods: Set<String> = ["Unbind", "ReleaseOverride", "Cancel", "UnregisterHandler"]

    /// Refuses a call that would write or start something from a caller past its quota.
    func admitCall(_ call: MethodCall, isWrite: Bool) -> DBusError? {
        let member = call.message.member ?? ""
        guard isWrite || member == "Execute" || member == "Start" || member == "Override", !Self.releasingMethods.contains(member),
              let principal = principal(of: call.sender, uid: call.credentials?.userID) else { return nil }
        let used = quota.used(by: principal, now: Self.now)
        guard used >= quota.limit else { return nil }
        return quota.refusal(of: member, principal: principal, used: used)
    }

    /// Charges a signal to the callers that caused it, shared between them (it was sent already).
    mutating func chargeSignal(causedBy causes: Set<SignalCause>, size: () -> Int) {
        let principals = Set(causes.compactMap { principal(of: $0.sender, uid: access.isEnabled ? $0.userID : nil) })
        guard !principals.isEmpty else { return }
        let share = (size() + principals.count - 1) / principals.count
        let now = Self.now
        for principal in principals { _ = quota.charge(share, to: principal, now: now, regardless: true) }
    }

    /// The bytes `call`'s caller may still be sent in the window (`nil`: it is not charged).
    func replyBytesLeft(for call: MethodCall) -> Int? {
        guard let principal = principal(of: call.sender, uid: call.credentials?.userID) else { return nil }
        return max(0, quota.limit - quota.used(by: principal, now: Self.now))
    }

    /// `LimitsExceeded` for a reply of `size` bytes `call`'s caller may not be sent, having
    /// `left` bytes of its quota left.
    func refusal(size: Int, left: Int, for call: MethodCall) -> DBusError? {
        principal(of: call.sender, uid: call.credentials?.userID).map { quota.refusal(size: size, principal: $0, used: quota.limit - left) }
    }
}

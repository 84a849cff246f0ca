import Dispatch
import Glibc
import SystemKit

extension FileEndpoint {
    func write(_ text: String) throws(CommandFailure) -> Bool {
        collectEvents()
        guard !pendingComplete, !pendingModified, settle == nil, current() == notified else {
            // The file changed and the channel has not heard of it yet: that change goes first.
            if pendingComplete || pendingModified { deliverCollectedLater() } else if settle == nil { scheduleSettle() }
            return false
        }
        let bytes = Array((text + "\n").utf8)
        if inPlace {
            let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o666)
            guard descriptor >= 0 else { throw failure("cannot open \(path) for writing") }
            defer { close(descriptor) }
            guard writeAll(descriptor, bytes) else { throw failure("cannot write \(path)") }
            notified = text
            return true
        }
        var template = Array("\(directory)/.\(name).propctl-XXXXXX".utf8CString)
        let descriptor = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard descriptor >= 0 else { throw failure("cannot create a temporary file in \(directory)") }
        _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
        let temporary = String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
        // Keep the mode of the file being replaced, as editors do; a new file gets 0666 & ~umask.
        var status = stat()
        let mode: mode_t
        if stat(path, &status) == 0 {
            mode = status.st_mode & 0o7777
        } else {
            let mask = umask(0)
            umask(mask)
            mode = 0o666 & ~mask
        }
        fchmod(descriptor, mode)
        let written = writeAll(descriptor, bytes) && fsync(descriptor) == 0
        // The new inode is held and watched before the rename gives it the name, so a program
        // that opens it right after (a shell's `>`) is seen opening it: once the name is ours,
        // a watch added on its event would come too late for that open. Opened before it is
        // watched, and the writing descriptor closed before too: neither is an event.
        let replacement = open("/proc/self/fd/\(descriptor)", O_RDONLY | O_CLOEXEC | O_NOCTTY)
        close(descriptor)
        // Another program may have started writing since the channel compared: a writer's
        // truncation can be seen before its inotify event is. Replacing the file now would
        // throw its write away with the old inode, so the write yields to the local change.
        if collectEvents() || settle != nil {
            if replacement >= 0 { close(replacement) }
            unlink(temporary)
            deliverCollectedLater()
            return false
        }
        let replacementWatch = replacement >= 0 ? inotify_add_watch(inotify, "/proc/self/fd/\(replacement)", Self.fileMask) : -1
        // A rename is all-or-nothing: a reader sees the old content or the new, never a part.
        guard written, rename(temporary, path) == 0 else {
            let error = failure("cannot replace \(path)")
            if replacementWatch >= 0 { inotify_rm_watch(inotify, replacementWatch) }
            if replacement >= 0 { close(replacement) }
            unlink(temporary)
            throw error
        }
        if replacementWatch >= 0 {
            var status = stat()
            if fstat(replacement, &status) == 0 {
                releaseFile()
                self.descriptor = replacement
                identity = (UInt64(status.st_dev), UInt64(status.st_ino))
                fileWatch = replacementWatch
            } else {
                inotify_rm_watch(inotify, replacementWatch)
                close(replacement)
            }
        } else if replacement >= 0 {
            close(replacement)
        }
        notified = text
        return true
    }

    /// Test only (`PROPCTL_TEST_FILE_READ_GATE=PATH`): while PATH exists, a read of the file
    /// stops before it looks at the name, says so on stderr and waits (10 s at most) for PATH to
    /// go, so a test can have another program open or create the file at exactly that moment.
    private static let readGate = Environment.value("PROPCTL_TEST_FILE_READ_GATE")

    func waitAtReadGate() {
        guard let gate = Self.readGate, access(gate, F_OK) == 0 else { return }
        Output.error("propctl bind: test gate: a read of \(path) waits until \(gate) is removed")
        for _ in 0..<10_000 where access(gate, F_OK) == 0 { usleep(1_000) }
    }

    private func writeAll(_ descriptor: Int32, _ bytes: [UInt8]) -> Bool {
        do { try FileDescriptor(rawValue: descriptor).writeAll(bytes) } catch { return false }
        return true
    }

    private func failure(_ what: String) -> CommandFailure {
        CommandFailure(.dbusError, "\(what): \(String(cString: strerror(errno)))")
    }
}

import Dispatch
import Glibc
import SystemKit

extension FileEndpoint {
    func write(_ text: String) throws(CommandFailure) -> Bool {
        collectEvents()
        guard !file.pendingComplete, !file.pendingModified, settle == nil, current() == notified else {
            // The file changed and the channel has not heard of it yet: that change goes first.
            if file.pendingComplete || file.pendingModified { deliverCollectedLater() } else if settle == nil { scheduleSettle() }
            return false
        }
        let bytes = Array((text + "\n").utf8)
        if inPlace {
            let descriptor: FileDescriptor
            do { descriptor = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_TRUNC) } catch { throw failure("cannot open \(path) for writing", error) }
            defer { try? descriptor.close() }
            do { try descriptor.writeAll(bytes) } catch { throw failure("cannot write \(path)", error) }
            notified = text
            return true
        }
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
        let temporary: String
        do { temporary = try DurableFile.writeTemporary(beside: path, bytes, mode: mode) } catch {
            throw failure("cannot write a temporary file in \(file.directory)", error)
        }
        // The new inode is held and watched before the rename gives it the name, so a program
        // that opens it right after (a shell's `>`) is seen opening it: once the name is ours,
        // a watch added on its event would come too late for that open. Opened before it is
        // watched (and its writing descriptor closed before too): neither is an event.
        let replacement = open(temporary, O_RDONLY | O_CLOEXEC | O_NOCTTY)
        // Another program may have started writing since the channel compared: a writer's
        // truncation can be seen before its inotify event is. Replacing the file now would
        // throw its write away with the old inode, so the write yields to the local change.
        if collectEvents() || settle != nil {
            if replacement >= 0 { close(replacement) }
            unlink(temporary)
            deliverCollectedLater()
            return false
        }
        let replacementWatch = replacement >= 0 ? file.watch(replacement) : -1
        // A rename is all-or-nothing: a reader sees the old content or the new, never a part.
        guard rename(temporary, path) == 0 else {
            let error = failure("cannot replace \(path)", .current)
            file.unwatch(replacementWatch)
            if replacement >= 0 { close(replacement) }
            unlink(temporary)
            throw error
        }
        if replacementWatch >= 0 {
            if !file.adopt(replacement, watch: replacementWatch) {
                file.unwatch(replacementWatch)
                close(replacement)
            }
        } else if replacement >= 0 {
            close(replacement)
        }
        notified = text
        return true
    }

    private func failure(_ what: String, _ error: Errno) -> CommandFailure {
        CommandFailure(.dbusError, "\(what): \(error)")
    }
}

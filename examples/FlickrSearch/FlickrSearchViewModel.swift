import Observation
import PropBusClient

/// The ReactiveCocoa MVVM introduction's `RWTFlickrSearchViewModel`, written with the client library: the screen's
/// state lives in propbusd (`examples/flickr-search.json`), this object is its view model in one
/// process, and any other process (`propctl`, another view) sees and changes the same state.
///
/// Every property is a binding, none a hand-written loop:
/// - `searchText` is bound two-way to `viewmodel.searchText`
///   (`RAC(self.viewModel, searchText) = self.searchTextField.rac_textSignal`);
/// - `loadingIndicatorHidden` follows the search command's `executing`, negated
///   (`RAC(self.loadingIndicator, hidden) = [self.executeSearch.executing not]`);
/// - `isSearchEnabled` follows the command's `enabled` (`validSearchSignal`);
/// - `title` follows `viewmodel.title`.
@MainActor @Observable
final class FlickrSearchViewModel {
    var title = ""
    var searchText = ""
    var loadingIndicatorHidden = true
    var isSearchEnabled = false

    @ObservationIgnored private let keys: FlickrSearchKeys
    @ObservationIgnored private let executeSearch: Command<String, String>
    @ObservationIgnored private var bindings: [ChannelBinding] = []

    init(keys: FlickrSearchKeys) {
        self.keys = keys
        executeSearch = keys.viewmodel.executeSearch
    }

    /// Connects the view model's properties to the daemon's keys.
    func start() {
        bindings = [
            keys.client.channel(keys.viewmodel.searchText).bind(\.searchText, of: self),
            bind(\.title, to: keys.viewmodel.title),
            bind(\.loadingIndicatorHidden, to: executeSearch.executing.map { !$0 }),
            bind(\.isSearchEnabled, to: executeSearch.enabled),
        ]
    }

    /// Runs the search with the current text (`[self.executeSearch execute:nil]`). The text
    /// typed just before reaches the daemon first: `execute` waits for bound writes.
    func search() async throws(PropBusClientError) -> String {
        try await executeSearch.execute(searchText)
    }

    /// Stops following the daemon.
    func stop() {
        for binding in bindings { binding.cancel() }
        bindings = []
    }
}

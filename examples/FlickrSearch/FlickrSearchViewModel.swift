import Observation
import PropBusClient

/// The ReactiveCocoa MVVM introduction's `RWTFlickrSearchViewModel`, written with the client library: the screen's
/// state lives in propbusd (`examples/flickr-search.json`), this object is its view model in one
/// process, and any other process (`propctl`, another view) sees and changes the same state.
///
/// - `searchText` is bound two-way to `viewmodel.searchText`
///   (`RAC(self.viewModel, searchText) = self.searchTextField.rac_textSignal`);
/// - `loadingIndicatorHidden` follows the search command's `executing`, negated
///   (`RAC(self.loadingIndicator, hidden) = [self.executeSearch.executing not]`);
/// - `isSearchEnabled` follows the command's `enabled` (`validSearchSignal`).
@MainActor @Observable
final class FlickrSearchViewModel {
    var title = ""
    var searchText = ""
    var loadingIndicatorHidden = true
    var isSearchEnabled = false

    @ObservationIgnored private let keys: FlickrSearchKeys
    @ObservationIgnored private let executeSearch: Command<String, String>
    @ObservationIgnored private var searchTextBinding: ChannelBinding?
    @ObservationIgnored private var followers: [Task<Void, Never>] = []

    init(keys: FlickrSearchKeys) {
        self.keys = keys
        executeSearch = keys.viewmodel.executeSearch
    }

    /// Connects the view model's properties to the daemon's keys.
    func start() {
        let client = keys.client
        searchTextBinding = client.channel(keys.viewmodel.searchText).bind(\.searchText, of: self)
        let title = keys.viewmodel.title
        followers.append(Task { [weak self] in
            // The controller reads the title once.
            for await value in title.values { self?.title = value; break }
        })
        let executing = executeSearch.isExecuting
        followers.append(Task { [weak self] in
            for await running in executing {
                guard let self, self.loadingIndicatorHidden == running else { continue }
                self.loadingIndicatorHidden = !running
                print("loading indicator hidden: \(!running)")
            }
        })
        let enabled = executeSearch.isEnabled
        followers.append(Task { [weak self] in
            for await value in enabled { self?.isSearchEnabled = value }
        })
    }

    /// Runs the search with the current text (`[self.executeSearch execute:nil]`).
    func search() async throws(PropBusClientError) -> String {
        try await executeSearch.execute(searchText)
    }

    /// Stops following the daemon.
    func stop() {
        searchTextBinding?.cancel()
        for follower in followers { follower.cancel() }
    }
}

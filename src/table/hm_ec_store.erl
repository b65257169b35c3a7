%% @doc Where an EC table keeps its state: the behaviour between the per-table core
%% ({@link hm_ec_table}) and storage, and the calls that dispatch to it.
%%
%% Three parts per table copy:
%% <ul>
%% <li>the rows: what reads show (one record per key, or every sibling for a `bag');</li>
%% <li>the metadata: the key state of the keys storage alone cannot represent (causally
%% unstable entries, or concurrent versions the conflict policy does not show), `Key =>
%% KeyState' (see {@link hm_ec_key});</li>
%% <li>the durable log, for `disc_copies' only: the unstable operations, the replica's
%% identity and delivered vector, the unstable clears; what a restart reads back.</li>
%% </ul>
%% Beside them, for CRDT tables, a volatile mark per key whose state the table's process holds
%% newer than its row (write-behind, see {@link hm_ec_table}): a reader outside the process
%% that finds the mark asks the process, one that does not reads the row. The mark is set
%% before the update is answered and cleared only after the row is written; it is never on
%% disc and never part of what a crash keeps.
%% Two implementations: {@link hm_ec_store_mnesia} (the runtime: the Mnesia table, its
%% metadata in an ETS table or in `hm_meta_Tab', the log in `hm_log_Tab') and
%% {@link hm_ec_store_map} (maps, for the simulator and properties). A store is
%% `{Module, State}'; every update returns the new store (the Mnesia one changes its tables in
%% place and returns itself).
-module(hm_ec_store).

-export([read/2, write/2, write_all/2, delete/2, all_keys/1, rows/1, size/1,
         meta_get/2, meta_put/3, meta_del/2, meta_keys/1, meta_rows/1, meta_size/1,
         meta_words/1, log_put/3, log_del/2, log_read/1, log_clear/1, is_disc/1, sync/1,
         unwritten_put/2, unwritten_del/2]).
-export_type([store/0]).

-type store() :: {module(), term()}.

-callback read(term(), St) -> [tuple()] when St :: term().
-callback write(tuple(), St) -> St when St :: term().
-callback write_all([tuple()], St) -> St when St :: term().
-callback delete(term(), St) -> St when St :: term().
-callback all_keys(term()) -> [term()].
-callback rows(term()) -> [tuple()].
-callback size(term()) -> non_neg_integer().
-callback meta_get(term(), term()) -> {ok, hm_ec_key:key_state()} | none.
-callback meta_put(term(), hm_ec_key:key_state(), St) -> St when St :: term().
-callback meta_del(term(), St) -> St when St :: term().
-callback meta_keys(term()) -> [term()].
-callback meta_rows(term()) -> [{term(), hm_ec_key:key_state()}].
-callback meta_size(term()) -> non_neg_integer().
-callback meta_words(term()) -> non_neg_integer().
-callback log_put(term(), term(), St) -> St when St :: term().
-callback log_del(term(), St) -> St when St :: term().
-callback log_read(term()) -> [{term(), term()}].
-callback log_clear(St) -> St when St :: term().
-callback is_disc(term()) -> boolean().
-callback sync(St) -> St when St :: term().
-callback unwritten_put(term(), St) -> St when St :: term().
-callback unwritten_del(term(), St) -> St when St :: term().

%% @doc What reads show for `Key'.
-spec read(term(), store()) -> [tuple()].
read(Key, {M, S}) -> M:read(Key, S).

%% @doc Store a record (a `set' replaces the key's record, a `bag' adds a sibling).
-spec write(tuple(), store()) -> store().
write(Rec, {M, S}) -> {M, M:write(Rec, S)}.

%% @doc Store records, as {@link write/2} of each in turn does (a state installed whole).
-spec write_all([tuple()], store()) -> store().
write_all(Recs, {M, S}) -> {M, M:write_all(Recs, S)}.

%% @doc Remove every record of `Key'.
-spec delete(term(), store()) -> store().
delete(Key, {M, S}) -> {M, M:delete(Key, S)}.

-spec all_keys(store()) -> [term()].
all_keys({M, S}) -> M:all_keys(S).

%% @doc Every record reads show.
-spec rows(store()) -> [tuple()].
rows({M, S}) -> M:rows(S).

-spec size(store()) -> non_neg_integer().
size({M, S}) -> M:size(S).

-spec meta_get(term(), store()) -> {ok, hm_ec_key:key_state()} | none.
meta_get(Key, {M, S}) -> M:meta_get(Key, S).

-spec meta_put(term(), hm_ec_key:key_state(), store()) -> store().
meta_put(Key, KS, {M, S}) -> {M, M:meta_put(Key, KS, S)}.

-spec meta_del(term(), store()) -> store().
meta_del(Key, {M, S}) -> {M, M:meta_del(Key, S)}.

-spec meta_keys(store()) -> [term()].
meta_keys({M, S}) -> M:meta_keys(S).

-spec meta_rows(store()) -> [{term(), hm_ec_key:key_state()}].
meta_rows({M, S}) -> M:meta_rows(S).

-spec meta_size(store()) -> non_neg_integer().
meta_size({M, S}) -> M:meta_size(S).

%% @doc Memory of the metadata, in words.
-spec meta_words(store()) -> non_neg_integer().
meta_words({M, S}) -> M:meta_words(S).

%% @doc Durable log (disc only; a no-op otherwise): keys are a dot (an unstable operation),
%% `state' (`{Self, Delivered}') and `clears'.
-spec log_put(term(), term(), store()) -> store().
log_put(Key, Value, {M, S}) -> {M, M:log_put(Key, Value, S)}.

-spec log_del(term(), store()) -> store().
log_del(Key, {M, S}) -> {M, M:log_del(Key, S)}.

-spec log_read(store()) -> [{term(), term()}].
log_read({M, S}) -> M:log_read(S).

-spec log_clear(store()) -> store().
log_clear({M, S}) -> {M, M:log_clear(S)}.

%% @doc Whether the state survives a restart (`disc_copies').
-spec is_disc(store()) -> boolean().
is_disc({M, S}) -> M:is_disc(S).

%% @doc Make every update made so far durable (a `disc_copies' store: `mnesia:sync_log/0');
%% nothing for a ram store. Until then a crash may lose any suffix of the updates, never a
%% part in the middle: the durable state is always the state after some prefix of them.
-spec sync(store()) -> store().
sync({M, S}) -> {M, M:sync(S)}.

%% @doc Mark `Key' as holding updates its row does not have yet (volatile: see above).
-spec unwritten_put(term(), store()) -> store().
unwritten_put(Key, {M, S}) -> {M, M:unwritten_put(Key, S)}.

%% @doc `Key''s row holds all its updates again.
-spec unwritten_del(term(), store()) -> store().
unwritten_del(Key, {M, S}) -> {M, M:unwritten_del(Key, S)}.

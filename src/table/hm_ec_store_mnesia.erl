%% @doc An EC table's storage in Mnesia ({@link hm_ec_store}), as the runtime keeps it on
%% each copy holder. All three tables are `local_content':
%% <ul>
%% <li>`Tab' holds what reads show, so every `mnesia:*' read inside `async_ec' runs
%% unchanged on it;</li>
%% <li>the metadata of unstable keys is in `hm_meta_Tab' for a `disc_copies' table, and for
%% `ram_copies' in an ETS table the table's process owns (as volatile as the copy, and much
%% cheaper than Mnesia's; a map on the process's heap saves the copies in and out of ETS
%% but cost more CPU per write in garbage collection, bench/REPORT.md);</li>
%% <li>`hm_log_Tab' keeps, on disc only, the unstable operations, `state' (the replica and
%% its delivered vector) and `clears'. Mnesia's log is append-only, so a crash loses a
%% suffix: at worst an effect whose delivery was not recorded, delivered again after the
%% restart, and effects are idempotent.</li>
%% <li>the marks of a CRDT table's keys whose state the table's process holds newer than
%% their rows, in an ETS table named {@link unwritten_name/1} that the process owns (so
%% the marks go with it), readable by any process of the node ({@link is_unwritten/2}).</li>
%% </ul>
%% An EC table is `read_only' for Mnesia (see hypermnesia:create_table/2), so that
%% `mnesia:transaction/1' cannot write it; writes to the table itself go through
%% {@link hm_ec_mnesia}, which opens the local copy for this process's dirty writes only,
%% keeps transactions refused, and reopens after Mnesia recomputed the commit targets.
%%
%% A `ram_copies' copy with no index, no subscriber (but {@link hm_ec_dirty}) and no
%% checkpoint on the table (Mnesia's `commit_work' for it is empty, or only that
%% subscription) is written straight into its ETS table: that is all
%% Mnesia's dirty commit path would do for it (`mnesia_lib:db_put/3'), after work that costs
%% a quarter of applying an operation (bench/REPORT.md). Whatever else is on the table
%% sends the write through Mnesia, checked at every write.
-module(hm_ec_store_mnesia).
-behaviour(hm_ec_store).

-export([new/4, forget/1, is_unwritten/2, unwritten_name/1]).
-export([read/2, write/2, write_all/2, delete/2, all_keys/1, rows/1, size/1,
         meta_get/2, meta_put/3, meta_del/2, meta_keys/1, meta_rows/1, meta_size/1,
         meta_words/1, log_put/3, log_del/2, log_read/1, log_clear/1, is_disc/1,
         sync/1, unwritten_put/2, unwritten_del/2]).
-export_type([state/0]).

-type state() :: #{tab := atom(), meta := {ets, ets:tid()} | {mnesia, atom()},
                   log := atom(), disc := boolean(), unwritten := atom() | ets:tid()}.

%% @doc The store of table `Tab' with helper tables `Meta' and `Log', and the copy's storage
%% type. A `ram_copies' copy's metadata lives in a new ETS table of the calling process.
-spec new(atom(), atom(), atom(), ram_copies | disc_copies | atom()) -> hm_ec_store:store().
new(Tab, Meta, Log, Storage) ->
    MetaStore = case Storage of
                    disc_copies -> {mnesia, Meta};
                    _ -> {ets, ets:new(hm_meta, [set, protected])}
                end,
    ok = hm_ec_mnesia:open(Tab),
    %% Mnesia's dirty writes made by others are replicated from now on
    ok = hm_ec_dirty:watch(Tab),
    Name = unwritten_name(Tab),
    Self = self(),
    U = case ets:info(Name, owner) of
            undefined -> ets:new(Name, [set, protected, named_table, {read_concurrency, true}]);
            Self ->
                %% a store made again by the same process starts with no marks
                true = ets:delete(Name),
                ets:new(Name, [set, protected, named_table, {read_concurrency, true}]);
            _ ->
                %% the table's process holds the name (a benchmark driving the core
                %% itself): marks of this store's own, seen by nobody else
                ets:new(hm_unwritten, [set, protected])
        end,
    {?MODULE, #{tab => Tab, meta => MetaStore, log => Log, disc => Storage =:= disc_copies,
                unwritten => U}}.

%% @doc Drop what the store owns outside Mnesia (the ETS metadata of a ram copy, the marks
%% of unwritten keys).
-spec forget(hm_ec_store:store()) -> ok.
forget({?MODULE, S}) ->
    _ = [delete_ets(E) || {ets, E} <- [maps:get(meta, S)]],
    delete_ets(maps:get(unwritten, S)).

%% Delete an ETS table that may be gone already.
delete_ets(E) ->
    try ets:delete(E), ok
    catch error:badarg -> ok
    end.

%% @doc The name of the ETS table of table `Tab''s marks of unwritten keys on this node.
-spec unwritten_name(atom()) -> atom().
unwritten_name(Tab) ->
    %% made once per table (atoms are never collected)
    case persistent_term:get({?MODULE, unwritten, Tab}, undefined) of
        undefined ->
            Name = list_to_atom("hm_unwritten:" ++ atom_to_list(Tab)),
            persistent_term:put({?MODULE, unwritten, Tab}, Name),
            Name;
        Name -> Name
    end.

%% @doc Whether this node's copy of `Tab' holds updates of `Key' its row does not have yet
%% (then only the table's process can show them). `false' when the table's process is not
%% running here: nothing is held outside the row then.
-spec is_unwritten(atom(), term()) -> boolean().
is_unwritten(Tab, Key) ->
    try ets:member(unwritten_name(Tab), Key)
    catch error:badarg -> false
    end.

-spec unwritten_put(term(), state()) -> state().
unwritten_put(Key, S = #{unwritten := U}) -> true = ets:insert(U, {Key}), S.

-spec unwritten_del(term(), state()) -> state().
unwritten_del(Key, S = #{unwritten := U}) -> true = ets:delete(U, Key), S.

-spec read(term(), state()) -> [tuple()].
read(Key, #{tab := Tab, disc := false}) ->
    try ets:lookup(Tab, Key)
    catch error:badarg -> dirty_read(Tab, Key)              % not here: Mnesia's answer
    end;
read(Key, #{tab := Tab}) -> dirty_read(Tab, Key).

%% Mnesia's read of the local copy. Deleting a table, Mnesia deletes its storage before its
%% schema says the table is gone, and a read in between aborts `badarg': it is the
%% `no_exists' it is a moment later, on which the table's process ends quietly.
dirty_read(Tab, Key) ->
    try mnesia:dirty_read(Tab, Key)
    catch exit:Reason:Stack ->
            case Reason =:= {aborted, {badarg, [Tab, Key]}}
                andalso ets:info(Tab, size) =:= undefined of
                true -> exit({aborted, {no_exists, Tab}});
                false -> erlang:raise(exit, Reason, Stack)
            end
    end.

-spec write(tuple(), state()) -> state().
write(Rec, S = #{tab := Tab, disc := false}) ->
    %% the copy may go away under the write (Mnesia stopped, the copy removed): Mnesia's
    %% path then gives the answer the table's process acts on
    case direct(Tab) andalso ets_insert(Tab, Rec) of
        true -> S;
        false -> ok = hm_ec_mnesia:write(Tab, Rec), S
    end;
write(Rec, S = #{tab := Tab}) -> ok = hm_ec_mnesia:write(Tab, Rec), S.

%% A copy written straight into its ETS table takes them in one insert (a state installed
%% whole: a large table's rows at once), otherwise one by one through Mnesia.
-spec write_all([tuple()], state()) -> state().
write_all(Recs, S = #{tab := Tab, disc := false}) ->
    case direct(Tab) andalso ets_insert(Tab, Recs) of
        true -> S;
        false -> lists:foldl(fun write/2, S, Recs)
    end;
write_all(Recs, S) -> lists:foldl(fun write/2, S, Recs).

-spec delete(term(), state()) -> state().
delete(Key, S = #{tab := Tab, disc := false}) ->
    case direct(Tab) andalso ets_delete(Tab, Key) of
        true -> S;
        false -> ok = hm_ec_mnesia:delete(Tab, Key), S
    end;
delete(Key, S = #{tab := Tab}) -> ok = hm_ec_mnesia:delete(Tab, Key), S.

%% Whether Mnesia's commit of a write to the local copy is only the ETS insert: a
%% `ram_copies' copy here, and nothing (index, subscriber, checkpoint) to do on commit.
%% Read on every write from Mnesia's global variables (what `mnesia_lib:val/1' reads):
%% an index or a subscriber may come at any time.
direct(Tab) ->
    try
        nothing_to_commit(ets:lookup_element(mnesia_gvar, {Tab, commit_work}, 2)) andalso
            ets:lookup_element(mnesia_gvar, {Tab, storage_type}, 2) =:= ram_copies
    catch error:badarg -> false
    end.

%% Nothing to do on commit but tell {@link hm_ec_dirty}, which ignores the table's own
%% writes anyway.
nothing_to_commit([]) -> true;
nothing_to_commit(Work) -> hm_ec_dirty:is_only_subscriber(Work).

%% The ETS write itself: `false' when the table is not there (deleted, or not loaded yet),
%% and Mnesia's path is taken instead.
ets_insert(Tab, Rec) ->
    try ets:insert(Tab, Rec)
    catch error:badarg -> false
    end.

ets_delete(Tab, Key) ->
    try ets:delete(Tab, Key)
    catch error:badarg -> false
    end.

-spec all_keys(state()) -> [term()].
all_keys(#{tab := Tab}) -> mnesia:dirty_all_keys(Tab).

-spec rows(state()) -> [tuple()].
rows(#{tab := Tab}) -> ets_rows(Tab).

-spec size(state()) -> non_neg_integer().
size(#{tab := Tab}) -> mnesia:table_info(Tab, size).

-spec meta_get(term(), state()) -> {ok, hm_ec_key:key_state()} | none.
meta_get(Key, #{meta := {ets, E}}) ->
    case ets:lookup(E, Key) of
        [{_, KS}] -> {ok, KS};
        [] -> none
    end;
meta_get(Key, #{meta := {mnesia, M}}) ->
    case mnesia:dirty_read(M, Key) of
        [{hm_meta, _, KS}] -> {ok, KS};
        [] -> none
    end.

-spec meta_put(term(), hm_ec_key:key_state(), state()) -> state().
meta_put(Key, KS, S = #{meta := {ets, E}}) -> true = ets:insert(E, {Key, KS}), S;
meta_put(Key, KS, S = #{meta := {mnesia, M}}) -> ok = mnesia:dirty_write(M, {hm_meta, Key, KS}), S.

-spec meta_del(term(), state()) -> state().
meta_del(Key, S = #{meta := {ets, E}}) -> true = ets:delete(E, Key), S;
meta_del(Key, S = #{meta := {mnesia, M}}) -> ok = mnesia:dirty_delete(M, Key), S.

-spec meta_keys(state()) -> [term()].
meta_keys(#{meta := {ets, E}}) -> ets:select(E, [{{'$1', '_'}, [], ['$1']}]);
meta_keys(#{meta := {mnesia, M}}) -> mnesia:dirty_all_keys(M).

-spec meta_rows(state()) -> [{term(), hm_ec_key:key_state()}].
meta_rows(#{meta := {ets, E}}) -> ets:tab2list(E);
meta_rows(#{meta := {mnesia, M}}) -> [{K, KS} || {hm_meta, K, KS} <- ets_rows(M)].

-spec meta_size(state()) -> non_neg_integer().
meta_size(#{meta := {ets, E}}) -> ets:info(E, size);
meta_size(#{meta := {mnesia, M}}) -> mnesia:table_info(M, size).

-spec meta_words(state()) -> non_neg_integer().
meta_words(#{meta := {ets, E}}) -> ets:info(E, memory);
meta_words(#{meta := {mnesia, M}}) -> mnesia:table_info(M, memory).

-spec log_put(term(), term(), state()) -> state().
log_put(K, V, S = #{disc := true, log := Log}) -> ok = mnesia:dirty_write(Log, {hm_log, K, V}), S;
log_put(_, _, S) -> S.

-spec log_del(term(), state()) -> state().
log_del(K, S = #{disc := true, log := Log}) -> ok = mnesia:dirty_delete(Log, K), S;
log_del(_, S) -> S.

-spec log_read(state()) -> [{term(), term()}].
log_read(#{disc := true, log := Log}) -> [{K, V} || {hm_log, K, V} <- ets_rows(Log)];
log_read(_) -> [].

-spec log_clear(state()) -> state().
log_clear(S = #{log := Log}) ->
    _ = [mnesia:dirty_delete(Log, K) || K <- mnesia:dirty_all_keys(Log)],
    S.

-spec is_disc(state()) -> boolean().
is_disc(#{disc := D}) -> D.

%% @doc A disc copy's updates so far are on disc (Mnesia's log is written asynchronously).
-spec sync(state()) -> state().
sync(S = #{disc := true}) -> _ = mnesia:sync_log(), S;
sync(S) -> S.

ets_rows(Tab) -> mnesia:dirty_select(Tab, [{'_', [], ['$_']}]).

%% @doc An EC table's storage in maps ({@link hm_ec_store}): what the simulator and the
%% properties run the per-table core on. Pure.
%%
%% `rows' holds `Key => [Record]' (one for a `set', the siblings of a `bag', in insertion
%% order), `meta' `Key => KeyState', `dlog' the durable log of a `disc' store (empty and
%% unused for `ram').
%%
%% A `disc' store models Mnesia's log of a `disc_copies' table, written asynchronously and
%% in order: `synced' is the state at the last {@link sync/1} and `pend' every update since,
%% newest first. A crash keeps the state after any prefix of `pend' ({@link durable/2},
%% {@link unsynced/1}): nothing of a ram store, at least everything up to the last sync of
%% a disc one.
-module(hm_ec_store_map).
-behaviour(hm_ec_store).

-export([new/2, durable/2, unsynced/1, rows_map/1, meta_map/1, unwritten/1]).
-export([read/2, write/2, write_all/2, delete/2, all_keys/1, rows/1, size/1,
         meta_get/2, meta_put/3, meta_del/2, meta_keys/1, meta_rows/1, meta_size/1,
         meta_words/1, log_put/3, log_del/2, log_read/1, log_clear/1, is_disc/1, sync/1,
         unwritten_put/2, unwritten_del/2]).
-export_type([state/0]).

-type update() :: {write, tuple()} | {delete, term()} | {meta_put, term(), term()}
                | {meta_del, term()} | {log_put, term(), term()} | {log_del, term()}
                | log_clear.
-type state() :: #{type := set | bag, disc := boolean(), rows := #{term() => [tuple()]},
                   meta := #{term() => hm_ec_key:key_state()}, dlog := map(),
                   synced := state() | none, pend := [update()],
                   unwritten := #{term() => true}}.

%% @doc An empty store: `set' or `bag', `ram' or `disc'.
-spec new(set | bag, ram | disc) -> hm_ec_store:store().
new(Type, Storage) ->
    S = #{type => Type, disc => Storage =:= disc, rows => #{}, meta => #{}, dlog => #{},
          synced => none, pend => [], unwritten => #{}},
    {?MODULE, synced(S)}.

%% @doc What a crash leaves when the first `Kept' updates since the last sync reached the
%% disc (`Kept' at most {@link unsynced/1}): the store a restart reads, everything in it
%% durable; `none' for a ram store.
-spec durable(hm_ec_store:store(), non_neg_integer()) -> hm_ec_store:store() | none.
durable({?MODULE, #{disc := true, synced := Base, pend := P}}, Kept) ->
    Prefix = lists:sublist(lists:reverse(P), Kept),
    %% the marks of unwritten keys are volatile: a crash keeps none
    {?MODULE, synced((lists:foldl(fun redo/2, Base, Prefix))#{unwritten := #{}})};
durable({?MODULE, _}, _) -> none.

%% @doc How many updates a crash could lose (made since the last sync; 0 for a ram store).
-spec unsynced(hm_ec_store:store()) -> non_neg_integer().
unsynced({?MODULE, #{disc := true, pend := P}}) -> length(P);
unsynced({?MODULE, _}) -> 0.

-spec sync(state()) -> state().
sync(S = #{disc := true}) -> synced(S);
sync(S) -> S.

%% the state as of now is on disc
synced(S = #{disc := true}) -> S#{synced := S#{synced := none, pend := []}, pend := []};
synced(S) -> S.

redo({write, Rec}, S) -> write(Rec, S);
redo({delete, K}, S) -> delete(K, S);
redo({meta_put, K, KS}, S) -> meta_put(K, KS, S);
redo({meta_del, K}, S) -> meta_del(K, S);
redo({log_put, K, V}, S) -> log_put(K, V, S);
redo({log_del, K}, S) -> log_del(K, S);
redo(log_clear, S) -> log_clear(S).

%% a disc store's update goes to its log (its base state is never logged: synced := none)
logged(U, S = #{disc := true, synced := #{}, pend := P}) -> S#{pend := [U | P]};
logged(_, S) -> S.

%% @doc What reads show, as `Key => [Record]'.
-spec rows_map(hm_ec_store:store()) -> #{term() => [tuple()]}.
rows_map({?MODULE, #{rows := R}}) -> R.

%% @doc The keys marked as holding updates their rows do not have yet.
-spec unwritten(hm_ec_store:store()) -> [term()].
unwritten({?MODULE, #{unwritten := U}}) -> lists:sort(maps:keys(U)).

-spec meta_map(hm_ec_store:store()) -> #{term() => hm_ec_key:key_state()}.
meta_map({?MODULE, #{meta := M}}) -> M.

-spec read(term(), state()) -> [tuple()].
read(Key, #{rows := R}) -> maps:get(Key, R, []).

-spec write(tuple(), state()) -> state().
write(Rec, S = #{type := set, rows := R}) ->
    logged({write, Rec}, S#{rows := R#{element(2, Rec) => [Rec]}});
write(Rec, S = #{type := bag, rows := R}) ->
    K = element(2, Rec),
    Old = maps:get(K, R, []),
    logged({write, Rec}, S#{rows := R#{K => (Old -- [Rec]) ++ [Rec]}}).

-spec write_all([tuple()], state()) -> state().
write_all(Recs, S) -> lists:foldl(fun write/2, S, Recs).

-spec delete(term(), state()) -> state().
delete(Key, S = #{rows := R}) -> logged({delete, Key}, S#{rows := maps:remove(Key, R)}).

-spec all_keys(state()) -> [term()].
all_keys(#{rows := R}) -> maps:keys(R).

-spec rows(state()) -> [tuple()].
rows(#{rows := R}) -> lists:append(maps:values(R)).

-spec size(state()) -> non_neg_integer().
size(#{rows := R}) -> maps:fold(fun(_, Rs, N) -> N + length(Rs) end, 0, R).

-spec meta_get(term(), state()) -> {ok, hm_ec_key:key_state()} | none.
meta_get(Key, #{meta := M}) ->
    case M of
        #{Key := KS} -> {ok, KS};
        _ -> none
    end.

-spec meta_put(term(), hm_ec_key:key_state(), state()) -> state().
meta_put(Key, KS, S = #{meta := M}) -> logged({meta_put, Key, KS}, S#{meta := M#{Key => KS}}).

-spec meta_del(term(), state()) -> state().
meta_del(Key, S = #{meta := M}) -> logged({meta_del, Key}, S#{meta := maps:remove(Key, M)}).

-spec meta_keys(state()) -> [term()].
meta_keys(#{meta := M}) -> maps:keys(M).

-spec meta_rows(state()) -> [{term(), hm_ec_key:key_state()}].
meta_rows(#{meta := M}) -> maps:to_list(M).

-spec meta_size(state()) -> non_neg_integer().
meta_size(#{meta := M}) -> map_size(M).

-spec meta_words(state()) -> non_neg_integer().
meta_words(#{meta := M}) -> erts_debug:flat_size(M).

-spec log_put(term(), term(), state()) -> state().
log_put(K, V, S = #{disc := true, dlog := D}) -> logged({log_put, K, V}, S#{dlog := D#{K => V}});
log_put(_, _, S) -> S.

-spec log_del(term(), state()) -> state().
log_del(K, S = #{dlog := D}) -> logged({log_del, K}, S#{dlog := maps:remove(K, D)}).

-spec log_read(state()) -> [{term(), term()}].
log_read(#{dlog := D}) -> maps:to_list(D).

-spec log_clear(state()) -> state().
log_clear(S) -> logged(log_clear, S#{dlog := #{}}).

-spec is_disc(state()) -> boolean().
is_disc(#{disc := D}) -> D.

%% volatile: not in the log a crash keeps a prefix of
-spec unwritten_put(term(), state()) -> state().
unwritten_put(Key, S = #{unwritten := U}) -> S#{unwritten := U#{Key => true}}.

-spec unwritten_del(term(), state()) -> state().
unwritten_del(Key, S = #{unwritten := U}) -> S#{unwritten := maps:remove(Key, U)}.

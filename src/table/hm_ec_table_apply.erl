%% @doc Algorithm 2 of the Hypermnesia paper (*Hypermnesia: Eventual Consistency in Mnesia*,
%% §4.8; the pure operation-based set, §4.5) for an EC table copy: a delivered
%% operation's effect on storage, key by key ({@link hm_ec_key}), what reads show rewritten
%% only when it changed, and, on a `disc_copies' copy, the log that lets a restart resume
%% (the operation, the delivered vector, an undo entry for a crash mid-operation). Part of
%% the per-table core ({@link hm_ec_table}); pure.
%%
%% Invariants: what reads show for a key is `hm_ec_key:view/3' of its state; the metadata
%% store holds only the keys storage alone cannot represent; a `prwset' clear is kept until
%% stable so that it beats concurrent writes that arrive later.
-module(hm_ec_table_apply).
-include("hm_ec_table.hrl").

-export([apply_op/3, apply_ready/3, apply_key/5, key_state/2, show/5, store_meta/4,
         persist/3, persist_clears/2, sync_store/1]).

%% Apply a causally delivered operation to storage (Algorithm 2), then log it on disc with
%% `Delivered', this copy's delivered vector once it is applied. A disc copy first logs what
%% the operation is about to change: Mnesia's log keeps any prefix of the writes through a
%% crash, so one operation's rows, metadata and log writes may be cut short, and the restart
%% undoes them (hm_ec_table_restore:undo_cut/4; the operation is then not delivered: members resend
%% it, or it was this copy's own and is lost with the crash, as an async_ec write on a disc copy can
%% be).
-spec apply_op(#t{}, hm_tcsb:message(), hm_vv:vv()) -> {#t{}, effects()}.
apply_op(T, Msg, Delivered) ->
    T1 = effect(log_undo(T, Msg), Msg),
    {persist(T1, Msg, Delivered), [{event, {applied, Msg}} || T#t.events]}.

%% Apply operations the broadcast layer delivered, in its order, `Delivered' what this copy
%% had delivered before the first: a disc copy logs, after each one, what it has delivered
%% up to that one.
-spec apply_ready(#t{}, [hm_tcsb:message()], hm_vv:vv()) -> {#t{}, effects()}.
apply_ready(T = #t{disc = false, events = false}, Ready, _) ->
    %% a ram copy logs nothing (persist/3), and only events make effects here
    {lists:foldl(fun(M, Acc) -> effect(Acc, M) end, T, Ready), []};
apply_ready(T, Ready, Delivered) ->
    {T1, Evs, _} = lists:foldl(fun(M = {O, Ts, _}, {Acc, E, V}) ->
                                       V1 = V#{O => maps:get(O, Ts)},
                                       {Acc1, E1} = apply_op(Acc, M, V1),
                                       {Acc1, E ++ E1, V1}
                               end, {T, [], Delivered}, Ready),
    {T1, Evs}.

log_undo(T = #t{crdt = Spec}, _) when Spec =/= none ->
    %% a CRDT table's operation writes no row (write-behind): nothing to undo
    %% (hm_ec_table_restore:replay/3)
    T;
log_undo(#t{disc = false} = T, _) -> T;
log_undo(T = #t{store = St, clears = Cs}, {Origin, Ts, {_, Key, Op}}) ->
    Keys = case Op of
               clear -> lists:usort(hm_ec_store:all_keys(St) ++ hm_ec_store:meta_keys(St));
               {crdt, {batch, Pairs}} -> lists:usort([K || {K, _} <- Pairs]);
               _ -> [Key]
           end,
    Before = [{K, hm_ec_store:read(K, St), hm_ec_store:meta_get(K, St)} || K <- Keys],
    Dot = {Origin, maps:get(Origin, Ts)},
    T#t{store = hm_ec_store:log_put(undo, {Dot, Before, Cs}, St)}.

effect(T = #t{store = St, type = Type, clears = Cs}, {Origin, Ts, {_Mode, _Key, clear}}) ->
    Keys = lists:usort(hm_ec_store:all_keys(St) ++ hm_ec_store:meta_keys(St)),
    T1 = lists:foldl(fun(K, Acc) -> apply_key(Acc, Origin, Ts, K, delete) end,
                     hm_ec_table_stream:touch_all(Keys, T), Keys),
    %% remove-wins: the clear also beats writes concurrent with it that arrive later, on keys
    %% not here yet; kept until stable (add-wins: a delete beats nothing it has not seen).
    %% `Handled': keys where the clear's delete is settled (it was applied here, or an
    %% operation that follows the clear has been applied and superseded it).
    case Type of
        prwset ->
            Handled = maps:from_list([{K, true} || K <- Keys]),
            persist_clears(T1#t{clears = [{{Origin, maps:get(Origin, Ts)}, Ts, Handled} | Cs]},
                           Cs);
        pawset -> T1
    end;
effect(T = #t{clears = [], ahead = none}, {Origin, Ts, {_Mode, Key, Op}}) ->
    %% (a state being sent in parts read late sends the key again: hm_ec_table_stream)
    apply_key(hm_ec_table_stream:touch(Key, T), Origin, Ts, Key, Op);
effect(T = #t{clears = []}, {Origin, Ts, {_Mode, Key, Op}}) ->
    %% a key joined from a state this copy has not delivered yet holds the operation already
    %% when that state held it (hm_ec_table_stream)
    case hm_ec_table_stream:skips(Key, {Origin, maps:get(Origin, Ts)}, T) of
        true -> T;
        false -> apply_key(hm_ec_table_stream:touch(Key, T), Origin, Ts, Key, Op)
    end;
effect(T = #t{clears = Cs}, {Origin, Ts, {_Mode, Key, Op}}) ->
    %% first, every unstable clear that has not touched the key yet leaves on it the delete it
    %% would have left had the key been here when the clear arrived (same dot and vector),
    %% oldest clear first; then the operation. One that follows the clear prunes that delete
    %% (hm_ec_key), one concurrent with it loses to it (remove-wins), whatever arrives first.
    {Cs1, T1} = lists:mapfoldl(
                  fun(C = {{CO, _} = CDot, CTs, Handled}, Acc) ->
                          case maps:is_key(Key, Handled) of
                              true -> {C, Acc};
                              false -> {{CDot, CTs, Handled#{Key => true}},
                                        apply_key(Acc, CO, CTs, Key, delete)}
                          end
                  end, T, lists:reverse(Cs)),
    T2 = apply_key(T1, Origin, Ts, Key, Op),
    persist_clears(T2#t{clears = lists:reverse(Cs1)}, Cs).

%% disc_copies: the unstable clears survive a restart too (written only when changed).
-spec persist_clears(#t{}, list() | undefined) -> #t{}.
persist_clears(T = #t{clears = Cs}, Cs) -> T;
persist_clears(T = #t{clears = Cs, store = St}, _) ->
    T#t{store = hm_ec_store:log_put(clears, Cs, St)}.

%% disc_copies: after the effect, log the operation (until it is stable, for retransmission)
%% and what this replica has delivered with it, `Delivered': not what the broadcast layer has
%% delivered by now, which may count operations of the same batch still to be applied (a
%% crash that kept only this far would restore a vector ahead of storage).
-spec persist(#t{}, hm_tcsb:message(), hm_vv:vv()) -> #t{}.
persist(T = #t{disc = false}, _, _) -> T;
persist(T = #t{store = St, tcsb = B}, Msg = {Origin, Ts, _}, Delivered) ->
    St1 = hm_ec_store:log_put({Origin, maps:get(Origin, Ts)}, Msg, St),
    T#t{store = hm_ec_store:log_put(state, {hm_tcsb:self(B), Delivered}, St1),
        unsynced = true}.

%% disc_copies: what was delivered so far is on disc (one `mnesia:sync_log/0').
-spec sync_store(#t{}) -> #t{}.
sync_store(T = #t{unsynced = false}) -> T;
sync_store(T = #t{store = St}) -> T#t{store = hm_ec_store:sync(St), unsynced = false}.

-spec apply_key(#t{}, hm_vv:replica(), hm_vv:vv(), term(), term()) -> #t{}.
apply_key(T = #t{tcsb = B}, Origin, Ts, _, {crdt, {batch, Pairs}}) ->
    case hm_tcsb:self(B) of
        Origin ->
            %% this incarnation's own epoch: every update in it was applied when it was made
            %% (hm_ec_table_write_behind:batch/5), or when the restart that found it unsent replayed
            %% it (hm_ec_table_restore:replay/3)
            T;
        _ ->
            %% an epoch's payloads, in order, to the keys' states in memory
            Dot = {Origin, maps:get(Origin, Ts)},
            lists:foldl(fun({Key, P}, Acc) ->
                                C = hm_ec_table_write_behind:crdt_state(Key, Acc),
                                hm_ec_table_write_behind:crdt_put(
                                  Key, hm_ec_crdt:effect(P, Dot, Ts, C), Acc)
                        end, T, Pairs)
    end;
apply_key(T = #t{crdt = Spec}, Origin, Ts, Key, {crdt, P}) when Spec =/= none ->
    Dot = {Origin, maps:get(Origin, Ts)},
    C = hm_ec_table_write_behind:crdt_state(Key, T),
    %% an operation replayed after a restart may be in the key's state already
    %% (hm_ec_table_restore:replay/3)
    case P of
        {op, _} -> case hm_vv:contains(Dot, hm_crdt:delivered(C)) of
                       true -> T;
                       false -> hm_ec_table_write_behind:crdt_put(
                                  Key, hm_ec_crdt:effect(P, Dot, Ts, C), T)
                   end;
        _ -> hm_ec_table_write_behind:crdt_put(Key, hm_ec_crdt:effect(P, Dot, Ts, C), T)
    end;
apply_key(T = #t{store = St}, Origin, Ts, Key, Op = {write, _, _}) ->
    case hm_ec_store:meta_get(Key, St) of
        none ->
            %% every version of the key is stable, and a write supersedes them all (they
            %% precede it): what storage shows is replaced without being read (the common
            %% case under load, a row lookup saved per operation)
            apply_key(T, Origin, Ts, Key, Op, {[], []}, replace);      % hm_ec_key:new()
        {ok, KS} -> apply_key(T, Origin, Ts, Key, Op, KS, unknown)
    end;
apply_key(T = #t{store = St}, Origin, Ts, Key, Op) ->
    {KS, Shown} = key_state(Key, St),
    apply_key(T, Origin, Ts, Key, Op, KS, Shown).

apply_key(T = #t{type = Type, store = St}, Origin, Ts, Key, Op, KS, Shown) ->
    KS1 = hm_ec_key:effect(Type, Op, {Origin, maps:get(Origin, Ts)}, Ts, KS),
    N = T#t.conflicts + case hm_ec_key:concurrent(Ts, KS) of true -> 1; false -> 0 end,
    T#t{store = store_meta(T, Key, KS1, show(T, Key, KS1, Shown, St)), conflicts = N}.

%% A key's state here: its metadata, or the versions storage shows; and what reads show
%% when storage was read for it (`unknown' otherwise: see show/5).
-spec key_state(term(), hm_ec_store:store()) -> {hm_ec_key:key_state(), [tuple()] | unknown}.
key_state(K, St) ->
    case hm_ec_store:meta_get(K, St) of
        {ok, KS} -> {KS, unknown};
        none -> Rows = hm_ec_store:read(K, St), {hm_ec_key:new(Rows), Rows}
    end.

%% What reads show for a key, written only when it changed.
-spec show(#t{}, term(), hm_ec_key:key_state(), [tuple()] | unknown | replace,
           hm_ec_store:store()) -> hm_ec_store:store().
show(T, Key, KS, unknown, St) ->
    show(T, Key, KS, hm_ec_store:read(Key, St), St);
show(#t{type = Type, policy = Policy}, Key, KS, Shown, St) ->
    %% `Shown' is what storage shows, or `replace' (no view: whatever it shows is replaced)
    case {Shown, hm_ec_key:view(Type, Policy, KS)} of
        {View, View} -> St;
        {_, []} -> hm_ec_store:delete(Key, St);
        {_, [R]} when Policy =/= siblings -> hm_ec_store:write(R, St);   % a set: replaces
        {_, View} -> lists:foldl(fun hm_ec_store:write/2, hm_ec_store:delete(Key, St), View)
    end.

%% The key's metadata, only while storage alone does not say it all (hm_ec_key:compact/3;
%% a key with timestamps keeps them, the case of every operation applied).
-spec store_meta(#t{}, term(), hm_ec_key:key_state(), hm_ec_store:store()) ->
          hm_ec_store:store().
store_meta(_, Key, KS = {_, [_ | _]}, St) -> hm_ec_store:meta_put(Key, KS, St);
store_meta(#t{type = Type, policy = Policy}, Key, KS, St) ->
    case hm_ec_key:compact(Type, Policy, KS) of
        none -> hm_ec_store:meta_del(Key, St);
        KS1 -> hm_ec_store:meta_put(Key, KS1, St)
    end.

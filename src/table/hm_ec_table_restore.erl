%% @doc Starting an EC table copy from its durable log: a `disc_copies' copy that restarts
%% (after a stop, a crash, `kill -9') takes up its rows, its delivered vector and its unstable
%% operations again, as a new incarnation, and undoes the one operation a crash may have cut
%% short. Part of the per-table core ({@link hm_ec_table}); pure.
%%
%% Invariants: a restored copy never reuses a sequence number of its old incarnation (the
%% crash may have lost operations members hold); what it counts as delivered is what its
%% rows hold (an operation logged without the state that counts it is undone and not
%% delivered); a CRDT table's rows, written once per epoch, get every logged operation they
%% lack applied again.
-module(hm_ec_table_restore).
-include("hm_ec_table.hrl").

-export([restorable/1, restore/5, with_format/1]).

%% @doc The replica's state in a disc log this release can read (a log written before the
%% format row existed has the same layout as format 1): `{state, {Self, Delivered}}', `none'
%% (nothing to restore) or `{unsupported_format, Version}'.
-spec restorable(list()) -> {state, {term(), hm_vv:vv()}} | none | {unsupported_format, term()}.
restorable(Log) ->
    Current = hm_ec_wire:disc_version(),
    case {lists:keyfind(format, 1, Log), lists:keyfind(state, 1, Log)} of
        {_, false} -> none;
        {{format, Current}, State} -> State;
        {false, State} -> State;
        {{format, V}, _} -> {unsupported_format, V}
    end.

%% @doc A disc store's log marked as written in this release's format.
-spec with_format(hm_ec_store:store()) -> hm_ec_store:store().
with_format(St) -> hm_ec_store:log_put(format, hm_ec_wire:disc_version(), St).

%% @doc The copy `T0' (built from its options, with its store) restored from its disc log
%% `Log', whose state `{Old, Delivered}' restorable/1 found: this node's new incarnation
%% (`Incarnation', or newer than `Old' when the clock went back), of the members `Ms'.
-spec restore({term(), hm_vv:vv()}, list(), {node(), term()}, [node()], #t{}) ->
          {#t{}, [hm_ec_table:effect()]}.
restore({Old, Delivered}, Log, {Node, Incarnation}, Ms,
        T0 = #t{tab = Tab, store = St, tcsb_opts = TOpts, epoch = Epoch}) ->
    %% a new incarnation with the restored state: the crash may have lost the last
    %% operations this copy made (Mnesia's log is written asynchronously), which
    %% members may have; as the old incarnation it would reuse their sequence numbers
    Self = {Node, next_incarnation(Old, Incarnation)},
    %% an operation logged without the state that counts it was cut short: it is
    %% not delivered here, and what it changed already is undone
    Logged = [M || {{Or, Seq}, M} <- Log, hm_vv:contains({Or, Seq}, Delivered)],
    {Clears, St0} = undo_cut(Log, Delivered, [C || {clears, Cs} <- Log, C <- Cs], St),
    B = hm_tcsb:restore_log(Logged, hm_tcsb:new(Self, Ms, Delivered, TOpts)),
    %% a state or delta CRDT table's updates applied but not sent before the restart
    Batch = [U || {crdt_batch, Us} <- Log, U <- Us],
    St1 = hm_ec_store:log_put(state, {Self, Delivered}, with_format(St0)),
    T1 = replay(Logged, lists:reverse(Batch),
                T0#t{tcsb = B, clears = Clears, store = St1, batch = Batch,
                     epoch_set = Batch =/= [], folded = Delivered}),
    {T1, [{info, "hypermnesia: ~p restored from disc (~p unstable operations)",
           [Tab, length(Logged)]}
          | [{timer, Epoch, crdt_epoch} || Batch =/= []]]}.

%% The operation a crash cut short (its `undo' entry is logged before it changes storage, its
%% state after: see hm_ec_table_apply:apply_op/3) leaves storage and the clears as they were before
%% it.
undo_cut(Log, Delivered, Clears, St) ->
    case lists:keyfind(undo, 1, Log) of
        {undo, {Dot, Before, ClearsBefore}} ->
            case hm_vv:contains(Dot, Delivered) of
                true -> {Clears, St};
                false ->
                    St1 = lists:foldl(fun({K, Rows, Meta}, Acc) ->
                                              Acc1 = lists:foldl(fun hm_ec_store:write/2,
                                                                 hm_ec_store:delete(K, Acc),
                                                                 Rows),
                                              case Meta of
                                                  {ok, KS} -> hm_ec_store:meta_put(K, KS, Acc1);
                                                  none -> hm_ec_store:meta_del(K, Acc1)
                                              end
                                      end, St, Before),
                    St2 = case ClearsBefore of
                              Clears -> St1;
                              _ -> hm_ec_store:log_put(clears, ClearsBefore, St1)
                          end,
                    {ClearsBefore, hm_ec_store:log_del(undo, St2)}
            end;
        false -> {Clears, St}
    end.

%% A CRDT table's rows are written once per epoch (write-behind), so what a crash kept of
%% them may lack any suffix of each key's updates since: every delivered operation still
%% logged is applied again, in causal order (ordered by the sum of its vector timestamp, a
%% linear extension of causality), where its key's state lacks it (op flavor: the key's
%% CRDT has not delivered its dot; the lattice flavors join, which is idempotent), and the
%% updates made here but not sent are applied too (the next epoch sends them). Nothing a
%% row lacks is missing from the log: an operation leaves the log only once stable, and a
%% disc copy writes its rows before it forgets stable operations
%% (hm_ec_table_stabilize:stabilize/2).
replay(_, _, T = #t{crdt = none}) -> T;
replay(Logged, Unsent, T0 = #t{tcsb = B}) ->
    Order = fun({O, Ts, _}) -> {lists:sum(maps:values(Ts)), O} end,
    T1 = lists:foldl(fun({O, Ts, {_, Key, Op}}, Acc) ->
                             hm_ec_table_apply:apply_key(Acc, O, Ts, Key, Op)
                     end, T0, lists:sort(fun(A, Bx) -> Order(A) =< Order(Bx) end, Logged)),
    %% the unsent updates, oldest first, as the origin applied them
    %% (hm_ec_table_write_behind:batch/5)
    Self = hm_tcsb:self(B),
    T2 = lists:foldl(fun({Key, P}, Acc) ->
                             C = hm_ec_table_write_behind:crdt_state(Key, Acc),
                             hm_ec_table_write_behind:crdt_put(
                               Key, hm_ec_crdt:effect(P, {Self, 1}, #{}, C), Acc)
                     end, T1, Unsent),
    hm_ec_table_write_behind:write_unwritten(T2).

%% Incarnations grow with time (the server makes them from the clock); a clock set back
%% still gives a newer one.
next_incarnation({_, Old}, New) when is_integer(Old), is_integer(New), New =< Old -> Old + 1;
next_incarnation(_, New) -> New.

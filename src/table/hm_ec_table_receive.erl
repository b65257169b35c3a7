%% @doc The receive step of Algorithm 1 of the Hypermnesia paper (*Hypermnesia: Eventual
%% Consistency in Mnesia*, §4.8; its delivery condition, §4.4) for an EC table copy: a
%% member's operations, in the order sent, checked (their shape, their record), handed to
%% causal delivery ({@link hm_tcsb}) and applied in causal order. Part of the per-table core
%% ({@link hm_ec_table}); pure.
%%
%% Invariants: an operation that does not fit the table is dropped, never applied; every
%% operation is applied once (a duplicate is counted); a `sync' write is answered
%% `applied' to its origin once delivered here.
-module(hm_ec_table_receive).
-include("hm_ec_table.hrl").

-export([receive_ops/3]).

%% Algorithm 1 "on receive" for a member's operations, in the order sent, in one pass
%% (a member sends the operations of a millisecond together; taken one message at a time,
%% the steps around each one cost a seventh of applying it, bench/REPORT.md): each is
%% checked (its shape, its record), handed to causal delivery, and what became deliverable
%% is applied in causal order, the hybrid clock moved past every write applied. A
%% duplicate is counted; a bad message is dropped and the others go on. `sync' callers
%% are answered once for the whole batch.
-spec receive_ops(node(), [term()], #t{}) -> {#t{}, effects()}.
receive_ops(From, Msgs, T = #t{tcsb = B0, hlc = H0, policy = Policy}) ->
    D0 = hm_tcsb:delivered(B0),
    {Ready, B1, Dups, Syncs, Drops} = deliverable(Msgs, From, T, B0, [], 0, [], []),
    {T1, Evs} = case Ready of
                    [] -> {T#t{tcsb = B1}, []};
                    _ when Policy =:= lww ->
                        hm_ec_table_apply:apply_ready(
                          T#t{tcsb = B1, hlc = newest_hlc(Ready, H0)}, Ready, D0);
                    _ -> hm_ec_table_apply:apply_ready(T#t{tcsb = B1}, Ready, D0)
                end,
    Effs = Evs ++ applied_syncs(Syncs, B1),
    {T1#t{duplicates = T#t.duplicates + Dups},
     case Drops of
         [] -> Effs;
         _ -> lists:reverse(Drops, Effs)
     end}.

%% The messages of `Msgs' that are well formed, fit the table and became deliverable, with
%% what causal delivery had buffered and they made deliverable, in delivery order; the
%% duplicates among them (already delivered here) counted, the `sync' ones kept
%% (applied_syncs/2: the well-formed ones of `Msgs', and those buffered before that they
%% made deliverable), the bad ones dropped.
deliverable([], _From, _T, B, Ready, Dups, Syncs, Drops) ->
    {lists:reverse(Ready), B, Dups, Syncs, Drops};
deliverable([Msg | Rest], From, T, B, Ready, Dups, Syncs0, Drops) ->
    Syncs = case Msg of
                {_, _, {sync, _, _}} -> [Msg | Syncs0];
                _ -> Syncs0
            end,
    %% the common case first: well formed and ready on arrival (which checks its vector's
    %% counters); one not ready is checked in full before causal delivery buffers it
    case fits_op(T, Msg) andalso hm_tcsb:receive_ready(Msg, B) of
        {More, B1} ->
            deliverable(Rest, From, T, B1, lists:reverse(More, Ready), Dups,
                        buffered_syncs(More, Syncs), Drops);
        NotReady ->
            case NotReady =:= not_ready andalso hm_causal_buffer:is_message(Msg) of
                true -> deliver_unready(Msg, Rest, From, T, B, Ready, Dups, Syncs, Drops);
                false -> deliverable(Rest, From, T, B, Ready, Dups, Syncs0,
                                     [{drop, {bad_op_message, T#t.tab, From}} | Drops])
            end
    end.

%% A message that is well formed but was not ready on arrival: buffered, a duplicate, or
%% (with what it makes ready) delivered after causal delivery takes note of it.
deliver_unready(Msg, Rest, From, T, B, Ready, Dups, Syncs, Drops) ->
    case hm_tcsb:receive_unready(Msg, B) of
        {[], B1} ->
            %% buffered until its causes arrive, or a duplicate
            Dup = case hm_causal_buffer:is_duplicate(Msg, hm_tcsb:delivered(B)) of
                      true -> 1;
                      false -> 0
                  end,
            deliverable(Rest, From, T, B1, Ready, Dups + Dup, Syncs, Drops);
        {More, B1} ->
            deliverable(Rest, From, T, B1, lists:reverse(More, Ready), Dups,
                        buffered_syncs(More, Syncs), Drops)
    end.

%% The `sync' operations among those a message made deliverable (itself alone, the common
%% case, is among `Syncs' already when it is one).
buffered_syncs([_], Syncs) -> Syncs;
buffered_syncs(More, Syncs) -> [M || M = {_, _, {sync, _, _}} <- More] ++ Syncs.

%% The hybrid clock past every write of `Msgs' (lww, the one policy that orders versions by
%% it: a copy's clock stays ahead of every write it holds).
newest_hlc([{_, _, {_, _, {write, _, {H, _}}}} | Rest], Acc) when H > Acc ->
    newest_hlc(Rest, H);
newest_hlc([_ | Rest], Acc) -> newest_hlc(Rest, Acc);
newest_hlc([], Acc) -> Acc.

%% sync_ec callers at the origin wait for the `applied' answer: every sync operation
%% among `Msgs' that is delivered here is answered, duplicates included (a state transfer may
%% have brought its effect before the operation itself arrived).
applied_syncs([], _) -> [];
applied_syncs(Syncs, B) ->
    Delivered = hm_tcsb:delivered(B),
    [{send, ON, {applied, Dot}}
     || {O = {ON, _}, Ts, _} <- lists:usort(Syncs),
        Dot <- [{O, maps:get(O, Ts)}], hm_vv:contains(Dot, Delivered)].

%% A member's operation is well formed (hm_ec_wire:is_op_shape/1, its vector's counters
%% aside) and fits the table (fits/2): an `async' write of a record, the common case, in
%% one match.
fits_op(#t{crdt = none, record = {Name, Arity}},
        {{N, _}, Ts, {async, Key, {write, Rec, {H, HN}}}})
  when is_atom(N), is_map(Ts), is_integer(H), is_atom(HN), tuple_size(Rec) =:= Arity,
       element(1, Rec) =:= Name, element(2, Rec) =:= Key ->
    true;
fits_op(T, Msg) -> hm_ec_wire:is_op_shape(Msg) andalso fits(T, Msg).

%% A record operation names its record's own key, and the record fits the table; a CRDT
%% table takes CRDT payloads of its type and flavor only.
fits(#t{crdt = none}, {_, _, {_, _, {crdt, _}}}) -> false;
fits(#t{crdt = none, record = {Name, Arity}}, {_, _, {_, Key, Op}}) ->
    case Op of
        {write, Rec, _} -> fits_record(Rec, Key, Name, Arity);
        {delete_object, Rec} -> fits_record(Rec, Key, Name, Arity);
        _ -> true
    end;
fits(#t{crdt = Spec}, {_, _, {_, _, {crdt, Payload}}}) -> hm_ec_crdt:is_payload(Spec, Payload);
fits(#t{}, _) -> false.

fits_record(Rec, Key, Name, Arity) ->
    tuple_size(Rec) =:= Arity andalso element(1, Rec) =:= Name andalso element(2, Rec) =:= Key.

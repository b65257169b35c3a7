%% @doc The per-key core of CRDT tables, pure: what one key of a CRDT table holds and how an
%% operation on it is prepared at its origin and applied at every copy (the ChiaVe paper,
%% *ChiaVe: A Flexible CRDT-Based Key-Value Store*, §3–4: a CRDT value per key, in the op,
%% state or delta flavor chosen per store; the Hypermnesia paper, *Hypermnesia: Eventual
%% Consistency in Mnesia*, §2.10 and §4.5–4.7: pure op-based CRDTs over tagged causal stable
%% broadcast).
%%
%% A CRDT table is an EC table whose rows are `{Tab, Key, Crdt}', `Crdt' a {@link hm_crdt}
%% of the table's type and flavor. Its copies replicate by the EC table core
%% ({@link hm_ec_table}): every operation is timestamped by the table's tagged causal
%% broadcast ({@link hm_tcsb}), delivered once at every copy in causal order, retransmitted
%% while a copy misses it, and a new copy catches up by state transfer of the rows. What
%% travels per operation depends on the flavor:
%% <ul>
%% <li>`op': the pure operation ({@link hm_crdt:prepare/3}); every copy, the origin
%% included, applies it with the broadcast's own dot and vector timestamp
%% ({@link hm_crdt:effect/4}), so causal redundancy is judged on the table's causal order and
%% the broadcast's stable vector compacts the key ({@link stabilize/3}): once every
%% operation on a key is stable it holds no timestamp.</li>
%% <li>`state': the key's whole new state ({@link hm_crdt:mutate/3}), joined at every copy.</li>
%% <li>`delta': the delta of the operation, joined at every copy.</li>
%% </ul>
%% In the lattice flavors the table core applies an update where it is made at once and sends
%% the updates of a broadcast epoch together, as one `{batch, [{Key, Payload}]}' payload
%% (the ChiaVe paper, §4: propagation per broadcast epoch): `state', the last state of each
%% key; `delta', each key's deltas joined into one delta-interval (`{interval, Event}',
%% *Delta State Replicated Data Types*, Definition 4; see {@link epoch_payloads/2}).
%% In the lattice flavors the broadcast's exactly-once causal delivery is more than the join
%% needs; joins are idempotent, so a state or delta that arrives twice changes nothing.
%%
%% Invariants: an operation is prepared only when it is an operation of the type (otherwise
%% `{error, {bad_op, Type, Op}}' and nothing changes); applying the same operations in any
%% causal order gives the same value at every copy; {@link stabilize/3} never changes the
%% value.
-module(hm_ec_crdt).

-export([new/1, prepare/4, effect/4, is_unstable/1, value/1, empty_value/1,
         is_payload/2, is_spec/1, epoch_payloads/2, stabilize/3, stable_groups/2]).
-export_type([spec/0, payload/0]).

%% The table's CRDT: its type and flavor.
-type spec() :: {hm_crdt:type(), hm_crdt:flavor()}.
%% What travels in the broadcast per operation.
-type payload() :: {op, term()} | {event, hm_crdt:event()} | {interval, hm_crdt:event()}
                 | {batch, [{term(), {event | interval, hm_crdt:event()}}]}.

%% @doc Whether a term names a CRDT type and flavor.
-spec is_spec(term()) -> boolean().
is_spec({T, F}) -> lists:member(T, hm_crdt:types()) andalso lists:member(F, hm_crdt:flavors());
is_spec(_) -> false.

%% @doc The state of a key never written.
-spec new(spec()) -> hm_crdt:crdt().
new({Type, Flavor}) -> hm_crdt:new(Type, Flavor).

%% @doc At the origin `Replica' (the broadcast's replica id), the payload that carries `Op'
%% on the key whose state is `C', and, in the lattice flavors, the key's state once `Op' is
%% applied here (the same as applying the payload to `C', without a join that costs as much
%% as the state is large; `none' in the op flavor, applied through the broadcast); or why
%% `Op' is not an operation of the type.
-spec prepare(term(), hm_vv:replica(), spec(), hm_crdt:crdt()) ->
          {ok, payload(), hm_crdt:crdt() | none} | {error, {bad_op, hm_crdt:type(), term()}}.
prepare(Op, Replica, {Type, Flavor}, C) ->
    case hm_crdt:is_op(Type, Op) of
        false -> {error, {bad_op, Type, Op}};
        true when Flavor =:= op ->
            case hm_crdt:prepare(Op, Replica, C) of
                {ok, PureOp} -> {ok, {op, PureOp}, none};
                {error, _} -> {error, {bad_op, Type, Op}}
            end;
        true ->
            case hm_crdt:mutate(Op, Replica, C) of
                {ok, C1, Ev} -> {ok, {event, Ev}, C1};
                {error, _} -> {error, {bad_op, Type, Op}}
            end
    end.

%% @doc Whether a payload received from another copy fits the table's CRDT (checked before
%% it is delivered, so a malformed one is dropped and never blocks the others).
-spec is_payload(spec(), term()) -> boolean().
is_payload({Type, op}, {op, PureOp}) -> hm_crdt:is_op(Type, PureOp);
is_payload({Type, Flavor}, {event, {hm_event, Flavor, Type, _}}) -> Flavor =/= op;
is_payload({Type, delta}, {interval, {hm_event, delta, Type, _}}) -> true;
is_payload(Spec = {_, Flavor}, {batch, Pairs}) when Flavor =/= op, is_list(Pairs) ->
    lists:all(fun({_, P = {event, _}}) -> is_payload(Spec, P);
                 ({_, P = {interval, _}}) -> is_payload(Spec, P);
                 (_) -> false
              end, Pairs);
is_payload(_, _) -> false.

%% @doc Apply a causally delivered payload with its broadcast dot and timestamp. A payload
%% the CRDT refuses leaves the key unchanged.
-spec effect(payload(), hm_vv:dot(), hm_vv:vv(), hm_crdt:crdt()) -> hm_crdt:crdt().
effect(Payload, Dot, Ts, C) ->
    R = case Payload of
            {op, PureOp} -> hm_crdt:effect(PureOp, Dot, Ts, C);
            {event, Ev} -> hm_crdt:deliver(Ev, C);
            {interval, Ev} -> hm_crdt:deliver(Ev, C)
        end,
    case R of
        {error, _} -> C;
        C1 -> C1
    end.

%% @doc What an epoch's updates `Pairs' (`{Key, Payload}', oldest first, as {@link prepare/4}
%% made them here) send: `state', the last state of each key; `delta', per key, the epoch's
%% deltas joined into one delta-interval (`{interval, Event}', a lone delta as it is, see
%% {@link hm_crdt:coalesce/1}), the keys in the order of their first update. Every copy then
%% makes one join per key and epoch, not one per update: 10,000 adds to one key in an epoch
%% were 10,000 joins through the key's causal buffer at every other copy, each with a
%% context that grows with the key's dots. Keys are independent CRDTs, and a copy applies an
%% epoch's pairs in one step, so their order across keys shows nowhere. A copy of a release
%% that does not read intervals refuses the whole epoch (its `is_payload/2' says no), which
%% the broadcast resends until that copy runs a release that reads it.
-spec epoch_payloads(spec(), [{term(), payload()}]) -> [{term(), payload()}].
epoch_payloads({_, state}, Pairs) ->
    %% the last state of each key
    lists:ukeysort(1, lists:reverse(Pairs));
epoch_payloads({_, delta}, Pairs) ->
    {Order, ByKey} = lists:foldl(fun({K, P}, {O, M}) ->
                                         case M of
                                             #{K := Ps} -> {O, M#{K := [P | Ps]}};
                                             _ -> {[K | O], M#{K => [P]}}
                                         end
                                 end, {[], #{}}, Pairs),
    [{K, P} || K <- lists:reverse(Order), P <- key_payloads(lists:reverse(maps:get(K, ByKey)))];
epoch_payloads(_, Pairs) -> Pairs.

key_payloads([P]) -> [P];
key_payloads(Ps) ->
    case lists:all(fun({event, _}) -> true; (_) -> false end, Ps) of
        true -> [case E of
                     {hm_event, delta, _, {_, _, _, _}} -> {interval, E};
                     _ -> {event, E}
                 end || E <- hm_crdt:coalesce([E || {event, E} <- Ps])];
        false -> Ps
    end.

%% @doc Causal stability: compact what the broadcast's stable vector `V' covers (op flavor;
%% the lattice flavors are unchanged), in the groups of the key's PO-log `Groups' (`all':
%% every one), as {@link stable_groups/2} names them for the operations that just became
%% stable.
-spec stabilize(hm_vv:vv(), [term()] | all, hm_crdt:crdt()) -> hm_crdt:crdt().
stabilize(V, Groups, C) -> hm_crdt:stable(V, Groups, C).

%% @doc The keys the payloads of operations that just became stable name, each with the
%% groups of its PO-log they name (a set's elements; `all' where the type or the payload
%% does not say): a key's group can only have become stable by one of them.
-spec stable_groups(spec(), [{term(), payload()}]) -> #{term() => [term()] | all}.
stable_groups({Type, _}, KeyPayloads) ->
    lists:foldl(fun({Key, {op, PureOp}}, Acc) ->
                        case {hm_crdt:op_groups(Type, PureOp), Acc} of
                            {_, #{Key := all}} -> Acc;
                            {all, _} -> Acc#{Key => all};
                            {Gs, #{Key := Old}} -> Acc#{Key := Gs ++ Old};
                            {Gs, _} -> Acc#{Key => Gs}
                        end;
                   ({Key, _}, Acc) -> Acc#{Key => all}
                end, #{}, KeyPayloads).

%% @doc Whether the key still holds timestamps that stability will fold (op flavor).
-spec is_unstable(hm_crdt:crdt()) -> boolean().
is_unstable(C) -> hm_crdt:has_timestamps(C).

%% @doc The value a key's state shows.
-spec value(hm_crdt:crdt()) -> term().
value(C) -> hm_crdt:value(C).

%% @doc The value of a key never written (`0', `[]', `undefined', `false').
-spec empty_value(spec()) -> term().
empty_value(Spec) -> hm_crdt:value(new(Spec)).

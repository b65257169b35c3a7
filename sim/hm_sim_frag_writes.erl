%% @doc Client operations of the partitioned-table family ({@link hm_sim_frag}), as the
%% runtime routes them: on the node's own ready copy of the key's fragment, else passed on
%% to the first holder it reaches that takes it ({@link hm_ec_frag:holder_order/3}), else
%% kept as a hint, handed off later in the runtime's order ({@link hm_ec_hints:pass_on/4});
%% a holder behind the node's earlier writes refuses ({@link hm_ec_table:submit_after/6}).
%% It records what the checkers need: the acknowledged operations, the node's sessions
%% (issue order per key) and the dot each operation got.
-module(hm_sim_frag_writes).

-export([client_op/4, hand_off/2]).

-import(hm_sim_frag, [copy/3, put_copy/4, effects/4, reachable/2]).

%% @doc A client operation `Spec' on `Key', issued on node `Nd'.
-spec client_op(node(), term(), term(), map()) -> map().
client_op(Nd, Key, Spec, S = #{cfg := Cfg = #{fragments := F}, now := Now}) ->
    K = hm_ec_frag:fragment(Key, F),
    KeyOp = case Spec of
                {update, Op} -> {Key, {update, hm_sim_crdt_table:client_op(Op, Now, Cfg)}};
                {write, V} -> {Key, {write, {r, Key, V}}};
                delete -> {Key, delete};
                {delete_object, V} -> {Key, {delete_object, {r, Key, V}}}
            end,
    Id = maps:get(ops, maps:get(stats, S), 0),
    S1 = session_issue(Nd, Key, Id, hm_sim_engine:bump(ops, S)),
    case copy(Nd, K, S1) of
        none -> pass_on(Nd, K, {Id, KeyOp}, S1);
        R ->
            case hm_ec_table:status(R) =:= ready andalso
                maps:get({Nd, K}, maps:get(hints, S1), []) =:= [] of
                false -> pass_on(Nd, K, {Id, KeyOp}, S1);   % syncing, or behind its hints
                true ->
                    %% a copy behind this node's earlier writes passed on: passed on too
                    case submit_at(Nd, Nd, K, KeyOp, S1#{try_ids := [Id]}) of
                        {ok, S2} -> S2;
                        {unreachable, S2} -> pass_on(Nd, K, {Id, KeyOp}, S2)
                    end
            end
    end.


%%% ================================================================ writes, hints

%% Submit at Nd's ready copy of fragment K a client operation issued on node By: an
%% acknowledged operation, by its dot; `unreachable' when the copy has not delivered By's
%% earlier writes passed on (the runtime's session order, hm_ec_table:submit_after/6).
submit_at(By, Nd, K, KeyOp, S = #{now := Now}) ->
    R = copy(Nd, K, S),
    After = session(By, K, S),
    {R1, Effs} = hm_ec_table:submit_after(After, KeyOp, async, client,
                                          {Now * 1000, reachable(Nd, S)}, R),
    case [Reply || {reply, client, Reply} <- Effs] of
        [{error, {behind, _}}] ->
            {unreachable, hm_sim_engine:bump(refused_behind, S)};
        [{ok, Dot}] ->
            %% the runtime notes the dots of writes passed on, and of local ones once the
            %% node has a session (hm_ec_server)
            S1 = case By =/= Nd orelse map_size(After) > 0 of
                     true -> note(By, K, Dot, put_copy(Nd, K, R1, S));
                     false -> put_copy(Nd, K, R1, S)
                 end,
            case KeyOp of
                {Key, {update, Op}} ->
                    %% a CRDT table's update: acknowledged when this copy took it
                    {Id, Info} = hm_sim_crdt_table:recorded(Key, Op, Effs, R1, maps:get(cfg, S)),
                    Us = maps:get(updates, S1, #{}),
                    {ok, effects(Nd, K, Effs, S1#{acked := [{K, Id} | maps:get(acked, S1)],
                                                  updates => Us#{Id => Info}})};
                _ -> submit_record(Nd, K, Effs, S1)
            end
    end.

session(By, K, S) -> maps:get({By, K}, maps:get(svv, S, #{}), #{}).

note(By, K, Dot, S) ->
    Svv = maps:get(svv, S, #{}),
    S#{svv => Svv#{{By, K} => hm_ec_hints:session_add(Dot, session(By, K, S))}}.

submit_record(Nd, K, Effs, S1) ->
    case [Msg || {send, _, {op, Msg}} <- Effs] ++ [M || {event, {applied, M}} <- Effs] of
        [{O, Ts, _} | _] ->
            Dot = {O, maps:get(O, Ts)},
            S2 = session_applied(Dot, Ts, S1),
            {ok, effects(Nd, K, Effs, S2#{acked := [{K, Dot} | maps:get(acked, S2)]})};
        [] ->
            {ok, effects(Nd, K, Effs, S1)}
    end.

%% Session order: the client operations each node issued on each key, in issue order (a
%% table of records; a CRDT table's updates are checked by the type's spec instead).
session_issue(_Nd, _Key, _Id, S = #{cfg := #{crdt := _}}) -> S;
session_issue(Nd, Key, Id, S = #{sessions := Ss}) ->
    S#{sessions := Ss#{{Nd, Key} => [Id | maps:get({Nd, Key}, Ss, [])]}}.

%% The operation being applied (the first of `try_ids', the order in which the writes of
%% one hand-off are tried) got dot `Dot' and causal timestamp `Ts'.
session_applied(Dot, Ts, S = #{try_ids := [Id | Ids], op_dots := Ds}) ->
    S#{try_ids := Ids, op_dots := Ds#{Id => {Dot, Ts}}};
session_applied(_, _, S) -> S.

%% Nd has no ready copy of K: the runtime's pass-on, with Nd's hints of K first.
pass_on(Nd, K, IdKeyOp, S) ->
    S1 = run_pass_on(Nd, K, IdKeyOp, S),
    hm_sim_engine:bump(passed_on, S1).

run_pass_on(Nd, K, IdNew, S = #{hints := Hints, hint_ids := HIds}) ->
    Mine = maps:get({Nd, K}, Hints, []),
    {NewId, New} = case IdNew of
                       none -> {none, none};
                       {_, _} -> IdNew
                   end,
    Try = fun(KeyOp, Acc) -> try_holders(Nd, K, KeyOp, Acc) end,
    Ids = [maps:get(Seq, HIds) || {Seq, _} <- Mine] ++ [NewId || New =/= none],
    {Sent, Outcome, S1} = hm_ec_hints:pass_on(Mine, New, Try, S#{try_ids := Ids}),
    Left = [H || H = {Id, _} <- Mine, not lists:member(Id, Sent)],
    Seq = maps:get(seq, S1),
    Kept = case Outcome of
               kept -> Left ++ [{Seq, New}];
               _ -> Left
           end,
    S2 = case Outcome of
             kept ->
                 HIds1 = (maps:get(hint_ids, S1))#{Seq => NewId},
                 hm_sim_engine:bump(hints_kept, S1#{seq := Seq + 1, hint_ids := HIds1});
             _ -> S1
         end,
    S2#{hints := (maps:get(hints, S2))#{{Nd, K} => Kept}, try_ids := []}.

%% The first holder of K that Nd reaches, that is ready and that has delivered Nd's earlier
%% writes passed on takes the write (any other refuses it, and the next is tried).
try_holders(Nd, K, KeyOp, S = #{holders := Holders}) ->
    Up = [H || H <- reachable(Nd, S), copy(H, K, S) =/= none,
               hm_ec_table:status(copy(H, K, S)) =:= ready],
    Own = [Nd || copy(Nd, K, S) =/= none,                  % the copy here first, as the
                 hm_ec_table:status(copy(Nd, K, S)) =:= ready],      % runtime tries it
    first_taking(Nd, K, KeyOp, Own ++ hm_ec_frag:holder_order(Nd, maps:get(K, Holders), Up), S).

%% A holder behind Nd's earlier writes refuses: the next is tried.
first_taking(_Nd, _K, _KeyOp, [], S) -> {unreachable, S};
first_taking(Nd, K, KeyOp, [H | Hs], S) ->
    case submit_at(Nd, H, K, KeyOp, S) of
        {unreachable, S1} -> first_taking(Nd, K, KeyOp, Hs, S1);
        Taken -> Taken
    end.

%% @doc Nd hands off the hints it holds, each fragment's in the runtime's order.
-spec hand_off(node(), map()) -> map().
hand_off(Nd, S = #{hints := Hints}) ->
    maps:fold(fun({N, K}, [_ | _], Acc) when N =:= Nd -> run_pass_on(Nd, K, none, Acc);
                 (_, _, Acc) -> Acc
              end, S, Hints).


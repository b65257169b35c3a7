%% @doc Causal stability for an EC table copy (the Hypermnesia paper,
%% *Hypermnesia: Eventual Consistency in Mnesia*, §4.7): once every
%% member has delivered an operation, the keys it touched lose their timestamps, and their
%% metadata row when storage alone says it all; stable operations leave the log. Part of the
%% per-table core ({@link hm_ec_table}); pure.
%%
%% Invariants: stabilization never changes what reads show; it looks only at the keys of the
%% operations that just became stable (every key on a full scan, after a clear, or once a
%% state this copy caught up with is stable), so it costs what became stable; a disc CRDT
%% table writes its rows before its log forgets operations.
%%
%% Folding in steps: after a long partition heals, the whole cut's keys become stable at
%% once (hundreds of thousands on a large table), and folding them in one step would hold
%% the copy's process, and its writers, for seconds. A table of records folds at most
%% `fold_keys' of them in one step ({@link fold_next/1}) and keeps the others to fold in the
%% steps after, its writers' and members' messages going in between. That is safe because
%% folding is only ever late, never early: a key still to fold keeps its timestamps, which is
%% what it had before it became stable, and is folded later against the stable vector of
%% then. That vector must cover the one the key became stable under: a member added
%% meanwhile can make the stable vector go back (it has delivered less), and a key folded
%% against it would keep its entries and be forgotten; so the keys wait, all of them, until
%% the stable vector covers that one again. While a state in parts is on its way nothing is
%% folded, as before.
-module(hm_ec_table_stabilize).
-include("hm_ec_table.hrl").

-export([stabilize/2, fold_next/1]).

%% Causal stability (§4.7): keys whose entries are all stable lose their timestamps, and
%% their metadata row when storage alone says it all; stable logged operations and clears
%% are forgotten. Only when the stable vector moved: otherwise there is nothing to fold.
%% `Full': every key is looked at, not only those of the operations that just became stable.
-spec stabilize(#t{}, boolean()) -> {#t{}, effects()}.
stabilize(T = #t{incoming = In}, _) when In =/= none ->
    %% not while a state in parts is on its way or being joined: the join of a key takes
    %% what this copy holds stable to be in the state too (hm_ec_key:join/2), and that state
    %% was built before what its sender acknowledged since (hm_ec_table_stream)
    {T, []};
stabilize(T = #t{tcsb = B, stable_seen = Seen, fold_after = FA}, Full) ->
    case hm_tcsb:stable(B) of
        Seen -> fold_more(T);
        V ->
            %% the keys a state this copy caught up with brought unstable entries to: their
            %% operations are not in this copy's log, so every key is looked at once they
            %% are all stable
            %% so are the keys of the operations given up unstable (hm_ec_table_give_up),
            %% once they are all stable
            {T1, Settled} = hm_ec_table_give_up:settled(
                              V, T#t{stable_seen = V, folded = hm_vv:join(T#t.folded, V)}),
            case FA =/= none andalso hm_vv:leq(FA, V) of
                true -> stabilize(T1#t{fold_after = none, unlisted = false}, V, true);
                false -> stabilize(T1, V, Full orelse Settled)
            end
    end.

stabilize(T0 = #t{tcsb = B, clears = Cs, events = Ev, disc = Disc}, V, Full) ->
    {GoneOps, B1} = hm_tcsb:gc_ops(B),
    %% the dots only where they are used: after a heal a copy may forget the whole cut's
    %% operations at once (bench/REPORT.md)
    Gone = case Disc orelse Ev of
               true -> [{O, maps:get(O, Ts)} || {O, Ts, _} <- GoneOps];
               false -> []
           end,
    %% a disc CRDT table writes its rows before its log forgets operations: a restart
    %% applies the logged ones again to what the rows lack (hm_ec_table_restore:replay/3)
    T = case GoneOps =/= [] andalso Disc of
            true -> hm_ec_table_write_behind:write_unwritten(T0);
            false -> T0
        end,
    %% only the keys of the operations that just became stable can have become stable
    %% (a key is, once its last unstable entry's operation is); every key after a clear,
    %% and on a full scan
    Keys = case Full orelse many_stable(GoneOps, T) of
               true -> all;
               false -> stable_keys(GoneOps, [])
           end,
    {T1a = #t{store = St1}, Dots} = fold(T, V, Keys, GoneOps),
    Clears = [C || C = {D, _, _} <- Cs, not hm_vv:contains(D, V)],
    %% a ram copy logs no operation (hm_ec_table_apply:persist/3)
    St2 = case Disc of
              true -> lists:foldl(fun hm_ec_store:log_del/2, St1, Gone);
              false -> St1
          end,
    T1 = hm_ec_table_apply:persist_clears(T1a#t{store = St2, tcsb = B1, clears = Clears}, Cs),
    {T2, Next} = next_step(T1),
    case Ev of
        true ->
            Folded = lists:usort(Dots ++ Gone ++ [D || {D, _, _} <- Cs -- Clears]),
            {T2, [{event, {stabilized, Folded}} || Folded =/= []] ++ Next};
        false -> {T2, Next}
    end.

%% @doc The `fold' continuation: the next `fold_keys' keys still to fold, against the stable
%% vector of now; another continuation goes when keys remain. Nothing while a state in
%% parts is on its way (the next tick after it goes on).
-spec fold_next(#t{}) -> {#t{}, effects()}.
fold_next(T = #t{incoming = In}) when In =/= none -> {T#t{fold_set = false}, []};
fold_next(T) -> fold_more(T#t{fold_set = false}).

%% Keys still to fold, when the stable vector did not move: the next of them.
fold_more(T = #t{fold_todo = []}) -> {T, []};
fold_more(T = #t{tcsb = B, events = Ev}) ->
    {T1, Dots} = fold(T, hm_tcsb:stable(B), [], []),
    {T2, Next} = next_step(T1),
    {T2, [{event, {stabilized, lists:usort(Dots)}} || Ev, Dots =/= []] ++ Next}.

%% A continuation when keys remain to fold, none is on its way, and the stable vector covers
%% the one they became stable under.
next_step(T = #t{fold_todo = [_ | _], fold_set = false, fold_upto = Upto, tcsb = B}) ->
    case hm_vv:leq(Upto, hm_tcsb:stable(B)) of
        true -> {T#t{fold_set = true}, [{continue, fold}]};
        false -> {T, []}
    end;
next_step(T) -> {T, []}.

%% Fold `Keys' (`all': every unstable key) against the stable vector `V', with the keys
%% still to fold from earlier steps; a table of records folds `fold_keys' of them at most
%% and keeps the others for the next step.
fold(T = #t{crdt = none, fold_keys = Max, fold_todo = Todo0, fold_upto = Upto0, store = St},
     V, Keys, GoneOps) when is_integer(Max) ->
    Todo = case Keys of
               %% every unstable key: those still to fold are among them
               all -> hm_ec_store:meta_keys(St);
               _ -> Keys ++ Todo0
           end,
    Upto = hm_vv:join(Upto0, V),
    case hm_vv:leq(Upto, V) of
        true ->
            {Now, Later} = take(Max, Todo, []),
            stabilize_keys(T#t{fold_todo = Later, fold_upto = upto(Later, Upto)}, V, Now,
                           GoneOps);
        false ->
            %% the stable vector went back (a member was added): they all wait
            {T#t{fold_todo = Todo, fold_upto = Upto}, []}
    end;
fold(T, V, Keys, GoneOps) ->
    stabilize_keys(T, V, Keys, GoneOps).

upto([], _) -> #{};
upto(_, Upto) -> Upto.

take(0, Rest, Acc) -> {Acc, Rest};
take(_, [], Acc) -> {Acc, []};
take(N, [K | Rest], Acc) -> take(N - 1, Rest, [K | Acc]).

%% A table of records that forgets more operations than it has unstable keys (the whole cut
%% after a heal) looks at every unstable key: fewer steps than finding the operations' keys.
many_stable(GoneOps, #t{crdt = none, store = St}) ->
    length(GoneOps) > hm_ec_store:meta_size(St);
many_stable(_, _) -> false.

%% The keys the operations touched, a hot key's as often as it was written (stabilize_keys/4
%% looks a key's metadata up when it comes to it: a key folded already has none), or `all'
%% when one of them is a clear.
stable_keys([], Acc) -> Acc;
stable_keys([{_, _, {_, _, clear}} | _], _) -> all;
stable_keys([{_, _, {_, _, {crdt, {batch, Pairs}}}} | Rest], Acc) ->
    stable_keys(Rest, lists:foldl(fun({K, _}, A) -> [K | A] end, Acc, Pairs));
stable_keys([{_, _, {_, Key, _}} | Rest], Acc) -> stable_keys(Rest, [Key | Acc]).

%% The keys and CRDT payloads of operations (an epoch's pairs each).
stable_payloads(Ops) ->
    lists:append([case Op of
                      {crdt, {batch, Pairs}} -> Pairs;
                      {crdt, P} -> [{Key, P}];
                      _ -> [{Key, Op}]
                  end || {_, _, {_, Key, Op}} <- Ops]).

%% The metadata rows of `Keys' (`all': every one).
meta_rows(all, St) -> hm_ec_store:meta_rows(St);
meta_rows(Keys, St) ->
    [{K, KS} || K <- Keys, {ok, KS} <- [hm_ec_store:meta_get(K, St)]].

%% A CRDT table: every key with unstable timestamps is compacted by its CRDT; an unwritten
%% key in memory (its row is written when the epoch ends), another in its row. Only the
%% groups of its PO-log the operations that just became stable named are looked at (an op
%% set's elements: a hot key of 10,000 elements costs what became stable, not a pass over
%% every element), except on a full scan (`all').
stabilize_keys(T0 = #t{crdt = Spec, record = {Name, _}, store = St0, unwritten = U0}, V, Keys,
               GoneOps) when Spec =/= none ->
    Hot = case Keys of
              all -> maps:keys(U0);
              _ -> [K || K <- Keys, is_map_key(K, U0)]
          end,
    Marked = [K || {K, _} <- meta_rows(Keys, St0)],
    %% a key none of them named (every key, on a full scan) is looked at whole (`all')
    Groups = case Keys of
                 all -> #{};
                 _ -> hm_ec_crdt:stable_groups(Spec, stable_payloads(GoneOps))
             end,
    Stabilize = fun(Key, C) -> hm_ec_crdt:stabilize(V, maps:get(Key, Groups, all), C) end,
    T1 = lists:foldl(fun(Key, T = #t{unwritten = U, store = St}) ->
                             case U of
                                 #{Key := C} ->
                                     T#t{unwritten = U#{Key := Stabilize(Key, C)}};
                                 _ ->
                                     case hm_ec_store:read(Key, St) of
                                         [{_, _, C}] ->
                                             C1 = Stabilize(Key, C),
                                             St1 = hm_ec_store:write({Name, Key, C1}, St),
                                             T#t{store = hm_ec_table_write_behind:crdt_meta(
                                                           Key, C1, St1)};
                                         _ -> T#t{store = hm_ec_store:meta_del(Key, St)}
                                     end
                             end
                     end, T0, lists:usort(Hot ++ Marked)),
    {T1, []};
stabilize_keys(#t{type = Type, policy = Policy, events = Ev, store = St0} = T, V, Keys,
               _GoneOps) ->
    %% stabilization never changes what reads show (hm_ec_prop checks it): only the
    %% metadata is rewritten
    Fold = fun(Key, KS = {_, KLog}, {St, Ds}) ->
                   case hm_ec_key:stabilize(Type, Policy, {V, KS}) of
                       KS -> {St, Ds};
                       KS1 -> {hm_ec_table_apply:store_meta(T, Key, KS1, St),
                               [D || Ev, {D, _, _} <- KLog] ++ Ds}
                   end
           end,
    {St1, Dots} =
        case Keys of
            all -> lists:foldl(fun({Key, KS}, Acc) -> Fold(Key, KS, Acc) end, {St0, []},
                               hm_ec_store:meta_rows(St0));
            _ -> lists:foldl(fun(Key, Acc = {St, _}) ->
                                     case hm_ec_store:meta_get(Key, St) of
                                         {ok, KS} -> Fold(Key, KS, Acc);
                                         none -> Acc
                                     end
                             end, {St0, []}, Keys)
        end,
    {T#t{store = St1}, Dots}.
